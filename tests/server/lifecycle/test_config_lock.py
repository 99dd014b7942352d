"""Config changes are serialized as ServerCore's ``config_mu_`` serializes them.

The real ``ServableManager`` with an injected loader whose ``load()`` blocks
until the test opens its gate (core/ takes any ``LoaderFactory``; no
TensorFlow is needed to order the threads). A "poll" is what the server's
config-file poller calls: ``reload_config(config, timeout=interval,
caller_gone=stop)``. Threads are ordered with events and with the manager's
count of config changes waiting for the lock.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Iterator, Optional

import pytest
from tensorflow_serving.config import model_server_config_pb2

from serving import status
from serving.server.core.manager import ServableManager

WAIT_S = 10.0
RACE_RUNS = 50


class GatedLoader:
    """A loader whose ``load()`` reports that it started, then waits for the gate."""

    def __init__(self, started: threading.Event, gate: threading.Event) -> None:
        self._started, self._gate = started, gate

    def estimate_resources(self) -> int:
        return 0

    def load(self) -> None:
        self._started.set()
        if not self._gate.wait(WAIT_S):
            raise status.Unknown("gate never opened")

    def unload(self) -> None:
        pass

    def servable(self) -> str:
        return "servable"


class Gates:
    """One (started, gate) pair per model name; models not named here load at once."""

    def __init__(self) -> None:
        self.started: dict[str, threading.Event] = {}
        self.gates: dict[str, threading.Event] = {}

    def hold(self, name: str) -> None:
        self.started[name], self.gates[name] = threading.Event(), threading.Event()

    def __call__(self, name: str, version: int, path: str) -> GatedLoader:
        opened = threading.Event()
        opened.set()
        return GatedLoader(self.started.get(name, threading.Event()), self.gates.get(name, opened))


def config(**models: Path) -> model_server_config_pb2.ModelServerConfig:
    proto = model_server_config_pb2.ModelServerConfig()
    proto.model_config_list.SetInParent()
    for name, base_path in models.items():
        entry = proto.model_config_list.config.add()
        entry.name, entry.base_path, entry.model_platform = name, str(base_path), "tensorflow"
    return proto


def version_dir(root: Path, name: str) -> Path:
    (root / name / "1").mkdir(parents=True, exist_ok=True)
    return root / name


class Reload(threading.Thread):
    """``manager.reload_config`` on its own thread; ``error`` is what it raised (None: OK)."""

    def __init__(self, manager: ServableManager, proto, timeout: Optional[float] = None,
                 caller_gone: Optional[threading.Event] = None) -> None:
        super().__init__(daemon=True)
        self._call = lambda: manager.reload_config(proto, timeout=timeout, caller_gone=caller_gone)
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            self._call()
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            self.error = exc


def wait_until(predicate, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        threading.Event().wait(0.005)


def waiting_for_lock(manager: ServableManager) -> bool:
    return getattr(manager, "_config_waiters", 0) == 1


@pytest.fixture
def gates() -> Gates:
    return Gates()


@pytest.fixture
def manager(gates) -> Iterator[ServableManager]:
    running = ServableManager(gates, max_num_load_retries=0, file_system_poll_wait_seconds=0)
    running.start()
    yield running
    for gate in gates.gates.values():
        gate.set()
    running.stop(drain_timeout=1)


def test_a_reload_during_a_poll_waits_for_the_polled_models_and_nothing_is_aborted(manager, gates, tmp_path):
    """50 runs: the poller's change holds the lock until its model is AVAILABLE; the RPC reload waits.

    Before the lock was held through the wait, the RPC's config replaced the poller's while the poller
    still waited for its model, and that wait ended ABORTED.
    """
    poll_stop = threading.Event()
    outcomes: list[str] = []
    for run in range(RACE_RUNS):
        polled, requested = f"polled{run}", f"requested{run}"
        gates.hold(polled)
        file_config = config(**{polled: version_dir(tmp_path, polled)})
        rpc_config = config(**{polled: version_dir(tmp_path, polled), requested: version_dir(tmp_path, requested)})
        poll = Reload(manager, file_config, timeout=WAIT_S, caller_gone=poll_stop)
        poll.start()
        assert gates.started[polled].wait(WAIT_S)   # the poll's model is loading: the poll holds the lock
        rpc = Reload(manager, rpc_config, timeout=WAIT_S)
        rpc.start()
        wait_until(lambda requested=requested: waiting_for_lock(manager) or manager.serves(requested),
                   "the RPC reload waits for the config lock (or, without one, applies its config)")
        assert not manager.serves(requested)         # it waits: its config is not applied yet
        gates.gates[polled].set()
        poll.join(WAIT_S)
        rpc.join(WAIT_S)
        assert not poll.is_alive() and not rpc.is_alive()
        outcomes += [type(r.error).__name__ if r.error else "OK" for r in (poll, rpc)]
        assert manager.serves(requested)
    assert outcomes.count("Aborted") == 0, outcomes
    assert outcomes == ["OK"] * (2 * RACE_RUNS), outcomes


def test_a_reload_naming_a_model_that_never_loads_ends_at_its_deadline_and_a_valid_reload_after_it_succeeds(
        manager, tmp_path):
    never = Reload(manager, config(never=tmp_path / "missing"), timeout=0.5)
    never.start()
    wait_until(lambda: manager.serves("never"), "the never-loading config is applied")
    valid = Reload(manager, config(good=version_dir(tmp_path, "good")), timeout=WAIT_S)
    valid.start()
    never.join(WAIT_S)
    assert isinstance(never.error, status.DeadlineExceeded), never.error
    valid.join(WAIT_S)
    assert not valid.is_alive() and valid.error is None, valid.error
    with manager.acquire("good") as servable:
        assert servable == "servable"


def test_a_reload_waiting_for_the_lock_ends_at_its_own_deadline_and_applies_nothing(manager, gates, tmp_path):
    gates.hold("slow")
    holder = Reload(manager, config(slow=version_dir(tmp_path, "slow")), timeout=WAIT_S)
    holder.start()
    assert gates.started["slow"].wait(WAIT_S)
    with pytest.raises(status.DeadlineExceeded, match="earlier config change"):
        manager.reload_config(config(other=version_dir(tmp_path, "other")), timeout=0.2)
    assert not manager.serves("other")
    gone = threading.Event()
    waiting = Reload(manager, config(other=version_dir(tmp_path, "other")), caller_gone=gone)
    waiting.start()
    wait_until(lambda: manager._config_waiters == 1, "the second reload waits for the config lock")
    gone.set()
    waiting.join(WAIT_S)
    assert isinstance(waiting.error, status.Cancelled), waiting.error
    gates.gates["slow"].set()
    holder.join(WAIT_S)
    assert holder.error is None, holder.error
    assert not manager.serves("other")
