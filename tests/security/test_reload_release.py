"""A reload waiting for a model that never gets a version releases: caller gone, deadline, or a later config.

The real ``ServableManager`` with base paths that never hold a version (nothing
is loaded, so no model is needed); threads are ordered with events.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
from tensorflow_serving.config import model_server_config_pb2

from serving import status
from serving.server.core.manager import ServableManager
from serving.server.tensorflow.loader import LoaderOptions, SavedModelLoader

WAIT_S = 10.0   # bound on any wait below; a released reload returns in well under a second


def config(**models: Path) -> model_server_config_pb2.ModelServerConfig:
    proto = model_server_config_pb2.ModelServerConfig()
    proto.model_config_list.SetInParent()
    for name, base_path in models.items():
        entry = proto.model_config_list.config.add()
        entry.name, entry.base_path, entry.model_platform = name, str(base_path), "tensorflow"
    return proto


@pytest.fixture
def manager() -> Iterator[ServableManager]:
    running = ServableManager(SavedModelLoader(LoaderOptions()), file_system_poll_wait_seconds=0)
    running.start()
    yield running
    running.stop(drain_timeout=1)


class Reload(threading.Thread):
    """``manager.reload_config`` on a thread of its own; ``error`` is what it raised."""

    def __init__(self, manager: ServableManager, proto, caller_gone: threading.Event | None = None) -> None:
        super().__init__(daemon=True)
        self.args_ = (manager, proto, caller_gone)
        self.error: BaseException | None = None

    def run(self) -> None:
        manager, proto, gone = self.args_
        try:
            manager.reload_config(proto, caller_gone=gone)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            self.error = exc


def wait_until_serving(manager: ServableManager, name: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not manager.serves(name):   # the reload applied its config (and now waits)
        assert time.monotonic() < deadline
        threading.Event().wait(0.01)


def test_a_reload_whose_caller_has_gone_stops_waiting_and_a_valid_reload_follows(manager, tmp_path):
    gone = threading.Event()
    waiting = Reload(manager, config(never=tmp_path / "missing"), gone)
    waiting.start()
    wait_until_serving(manager, "never")
    gone.set()
    waiting.join(WAIT_S)
    assert not waiting.is_alive()
    assert isinstance(waiting.error, status.Cancelled), waiting.error
    manager.reload_config(config(), timeout=WAIT_S)   # the config lock is free
    assert not manager.serves("never")


def test_a_waiting_reload_is_aborted_by_a_later_config_so_only_one_waits(manager, tmp_path):
    first = Reload(manager, config(a=tmp_path / "a"))
    first.start()
    wait_until_serving(manager, "a")
    second = Reload(manager, config(b=tmp_path / "b"))
    second.start()
    first.join(WAIT_S)
    assert isinstance(first.error, status.Aborted), first.error
    wait_until_serving(manager, "b")
    with pytest.raises(status.DeadlineExceeded):
        manager.reload_config(config(b=tmp_path / "b", c=tmp_path / "c"), timeout=0.3)
    second.join(WAIT_S)
    assert isinstance(second.error, status.Aborted), second.error


def test_the_same_config_again_does_not_wait(manager, tmp_path):
    with pytest.raises(status.DeadlineExceeded):
        manager.reload_config(config(never=tmp_path / "missing"), timeout=0.2)
    manager.reload_config(config(never=tmp_path / "missing"), timeout=WAIT_S)   # nothing new to wait for
