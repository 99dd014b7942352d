"""Waiting for what a system shows (a metric, a listener, a container's state) instead of sleeping."""
from __future__ import annotations

import threading
import time
from typing import Callable

__all__ = ["wait_until"]


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60.0, every: float = 0.02) -> float:
    """Poll ``condition`` every ``every`` s until it holds; the seconds it took. An AssertionError naming
    ``what`` after ``timeout`` s."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, f"{what}: not within {timeout:.0f} s"
        threading.Event().wait(every)
    return time.monotonic() - started
