"""The current request's deadline, visible to every layer that may wait on its behalf.

A front-end turns the client's deadline into an absolute ``time.monotonic()``
value (``deadline_after(seconds)``) and runs the request inside
``request_deadline(deadline)``; a batching queue reads ``remaining_seconds()``
to bound its wait (TF Serving turns the client deadline into the session's
``RunOptions.timeout_in_ms``). A deadline already past raises
``DeadlineExceeded`` before any work is done.

No deadline is None. A client that sets none still reaches the server with one:
gRPC reports "no deadline" as a huge ``time_remaining()``, which no wait can
take (``threading`` waits fail with ``OverflowError: timestamp out of range for
platform time_t``). So a deadline that is NaN, infinite or more than
``MAX_DEADLINE_SECONDS`` away means none, in ``deadline_after`` and in
``request_deadline``.

The value lives in a ``contextvars.ContextVar``, so it follows the request's
thread or task and never leaks into another request.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import time
from typing import Iterator, Optional

from serving import status

__all__ = ["MAX_DEADLINE_SECONDS", "deadline_after", "remaining_seconds", "request_deadline"]

MAX_DEADLINE_SECONDS = 365 * 24 * 3600.0
"""A deadline farther away than this (one year) is no deadline."""

_DEADLINE: contextvars.ContextVar[Optional[float]] = contextvars.ContextVar(
    "serving_request_deadline", default=None)


def deadline_after(seconds: Optional[float]) -> Optional[float]:
    """The absolute ``time.monotonic()`` deadline ``seconds`` from now; None means no deadline.

    None, NaN and more than ``MAX_DEADLINE_SECONDS`` (infinity included) all mean none.
    """
    if seconds is None or math.isnan(seconds) or seconds > MAX_DEADLINE_SECONDS:
        return None
    return time.monotonic() + seconds


def remaining_seconds() -> Optional[float]:
    """Seconds left before the current request's deadline, or None for no deadline."""
    deadline = _DEADLINE.get()
    return None if deadline is None else deadline - time.monotonic()


@contextlib.contextmanager
def request_deadline(deadline: Optional[float]) -> Iterator[None]:
    """Run the enclosed request under ``deadline`` (absolute monotonic seconds; None = none).

    NaN or more than ``MAX_DEADLINE_SECONDS`` away (infinity included) is none.
    """
    now = time.monotonic()
    if deadline is not None and (math.isnan(deadline) or deadline - now > MAX_DEADLINE_SECONDS):
        deadline = None
    if deadline is not None and now >= deadline:
        raise status.DeadlineExceeded("Deadline Exceeded")
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)
