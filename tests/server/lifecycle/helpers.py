"""Helpers for the lifecycle tests: configs, waiting, a metrics recorder."""
from __future__ import annotations

import time
from typing import Callable

__all__ = ["Metrics", "model_server_config", "wait_for", "states"]


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
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def states(manager, name: str) -> dict[int, str]:
    """version -> state name, from ``model_status``."""
    try:
        return {s.version: s.state.name for s in manager.model_status(name)}
    except Exception:
        return {}
