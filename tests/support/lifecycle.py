"""Helpers of the lifecycle tests: configs, waiting, recorders of what a manager reports (loads, unloads, polls)."""
from __future__ import annotations

import threading
from typing import Callable

from tests.support.wait import wait_until

__all__ = ["Metrics", "Unloads", "PollCounter", "model_server_config", "wait_for", "states"]


class Metrics:
    """A real stand-in for ``ServerMetrics``: it records what the loader reports."""

    def __init__(self) -> None:
        self.loads: list[tuple[str, bool]] = []
        self.warmups: list[tuple[str, bool, int]] = []

    def record_load(self, model_path: str, ok: bool, latency_us: float) -> None:
        assert latency_us >= 0
        self.loads.append((model_path, ok))

    def record_warmup(self, model_path: str, ok: bool, latency_us: float, records: int,
                      error: object = None) -> None:
        assert latency_us >= 0
        assert (error is None) == ok, "a failed warmup reports its error (it becomes the status label)"
        self.warmups.append((model_path, ok, records))


def model_server_config(*models: tuple) -> object:
    """``ModelServerConfig`` from (name, base_path[, policy text[, {label: version}]]) tuples."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    config = model_server_config_pb2.ModelServerConfig()
    for name, base_path, *rest in models:
        entry = config.model_config_list.config.add()
        entry.name, entry.base_path, entry.model_platform = name, str(base_path), "tensorflow"
        if rest and rest[0]:
            text_format.Parse(rest[0], entry.model_version_policy)
        if len(rest) > 1:
            for label, version in rest[1].items():
                entry.version_labels[label] = version
    return config


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    """Poll ``predicate`` until true; fail naming ``what`` after ``timeout`` seconds."""
    wait_until(predicate, what, timeout=timeout)


class Unloads:
    """A ``VersionEvents`` for ``ServableManager(heap=...)``: appends ``"unloaded"`` to ``log`` as each version is
    closed, so a test orders the unload against its own steps in the same list."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def version_loaded(self) -> None:
        pass

    def version_unloaded(self) -> None:
        self.log.append("unloaded")


class PollCounter:
    """Counts the manager's file-system polls: each poll announces every model's aspired versions to the manager.

    It wraps the callback the manager gave its ``FileSystemSource`` (a private attribute: the manager has no
    public poll event). ``wait(n)`` returns once ``n`` polls have been made since the counter was attached.
    """

    def __init__(self, manager) -> None:
        source = manager._source  # noqa: SLF001 - observed, not replaced: every call still reaches the manager
        self._announce, self._count, self._cond = source._callback, 0, threading.Condition()  # noqa: SLF001
        source._callback = self._counted  # noqa: SLF001

    def _counted(self, name, versions) -> None:
        self._announce(name, versions)
        with self._cond:
            self._count += 1
            self._cond.notify_all()

    def wait(self, polls: int, timeout: float = 60.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self._count >= polls, timeout), f"{polls} polls: not within {timeout} s"


def states(manager, name: str) -> dict[int, str]:
    """version -> state name, from ``model_status``."""
    try:
        return {s.version: s.state.name for s in manager.model_status(name)}
    except Exception:
        return {}
