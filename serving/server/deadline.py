"""The current request's deadline, visible to every layer that may wait on its behalf.

A front-end turns the client's deadline into an absolute ``time.monotonic()``
value and runs the request inside ``request_deadline(deadline)``; a batching
queue reads ``remaining_seconds()`` to bound its wait (TF Serving turns the
client deadline into the session's ``RunOptions.timeout_in_ms``). A deadline
already past raises ``DeadlineExceeded`` before any work is done.

The value lives in a ``contextvars.ContextVar``, so it follows the request's
thread or task and never leaks into another request.
"""
from __future__ import annotations

import contextlib
import contextvars
import time
from typing import Iterator, Optional

from serving import status

__all__ = ["remaining_seconds", "request_deadline"]

_DEADLINE: contextvars.ContextVar[Optional[float]] = contextvars.ContextVar(
    "serving_request_deadline", default=None)


def remaining_seconds() -> Optional[float]:
    """Seconds left before the current request's deadline, or None for no deadline."""
    deadline = _DEADLINE.get()
    return None if deadline is None else deadline - time.monotonic()


@contextlib.contextmanager
def request_deadline(deadline: Optional[float]) -> Iterator[None]:
    """Run the enclosed request under ``deadline`` (absolute monotonic seconds; None = none)."""
    if deadline is not None and time.monotonic() >= deadline:
        raise status.DeadlineExceeded("Deadline Exceeded")
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)
