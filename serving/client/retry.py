"""Retries: exponential backoff with jitter, bounded in attempts and by the call's deadline.

Only transient failures are retried: ``UNAVAILABLE`` (gRPC), HTTP 503, and
connection failures (which the transports report as ``Unavailable``). Never
``INVALID_ARGUMENT``, ``NOT_FOUND``, ``FAILED_PRECONDITION`` or anything else
by default, and never, whatever ``retry_codes`` says, a failed TLS handshake
(``TlsError``, code UNAVAILABLE) nor ``UNAUTHENTICATED`` / ``PERMISSION_DENIED``:
no retry can fix a certificate or a credential. The sync and async loops
share the policy; only sleeping differs.
"""
from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Optional, TypeVar

from serving import status
from serving.client.errors import TlsError

__all__ = ["RetryPolicy", "NO_RETRY", "call_with_retry", "acall_with_retry"]

T = TypeVar("T")

# Failures no retry can fix: the handshake's and the credentials'.
_NEVER_RETRIED_CODES = frozenset({status.Code.UNAUTHENTICATED, status.Code.PERMISSION_DENIED})


@dataclass(frozen=True)
class RetryPolicy:
    """How a client retries one call.

    Attempt ``n`` (1-based) that fails with a code in ``retry_codes`` is
    followed, after ``min(max_backoff, initial_backoff * multiplier**(n-1))``
    seconds scaled by a random factor in ``[1 - jitter, 1]``, by attempt
    ``n+1``, up to ``max_attempts`` in all and never past the call's deadline.
    ``on_retry(attempt, error, delay)``, if given, is called before each wait
    (for logging or metrics).
    """

    max_attempts: int = 5
    initial_backoff: float = 0.05
    max_backoff: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.5
    retry_codes: frozenset = field(default=frozenset({status.Code.UNAVAILABLE}))
    on_retry: Optional[Callable[[int, status.ServingError, float], None]] = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("jitter must be within [0, 1]")

    def should_retry(self, error: status.ServingError, attempt: int) -> bool:
        """True if ``error`` on attempt ``attempt`` deserves another attempt (never TLS or auth failures)."""
        if isinstance(error, TlsError) or error.code in _NEVER_RETRIED_CODES:
            return False
        return attempt < self.max_attempts and error.code in self.retry_codes

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based)."""
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        return base * (1.0 - self.jitter * (rng or random).random())


NO_RETRY = RetryPolicy(max_attempts=1)


def _deadline_error(timeout: float) -> status.DeadlineExceeded:
    return status.DeadlineExceeded(f"Deadline Exceeded: the call did not finish within {timeout:g}s")


def call_with_retry(attempt_fn: Callable[[float], T], policy: RetryPolicy, timeout: float,
                    *, sleep: Callable[[float], None] = time.sleep, deadline: Optional[float] = None) -> T:
    """Run ``attempt_fn(remaining_seconds)`` under ``policy`` within ``timeout`` seconds.

    ``deadline`` (``time.monotonic()`` seconds), when given, is the end of the
    whole API call this transport call belongs to (``timeout`` then only names
    it in the error): every call of one API call shares it.
    """
    deadline = time.monotonic() + timeout if deadline is None else deadline
    attempt = 0
    while True:
        attempt += 1
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _deadline_error(timeout)
        try:
            return attempt_fn(remaining)
        except status.ServingError as error:
            delay = _next_delay(policy, error, attempt, deadline)
            if delay is None:
                raise
        sleep(delay)


async def acall_with_retry(attempt_fn: Callable[[float], Awaitable[T]], policy: RetryPolicy,
                           timeout: float, *, deadline: Optional[float] = None) -> T:
    """``call_with_retry`` for coroutines; sleeps with ``asyncio.sleep``."""
    deadline = time.monotonic() + timeout if deadline is None else deadline
    attempt = 0
    while True:
        attempt += 1
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _deadline_error(timeout)
        try:
            return await attempt_fn(remaining)
        except status.ServingError as error:
            delay = _next_delay(policy, error, attempt, deadline)
            if delay is None:
                raise
        await asyncio.sleep(delay)


def _next_delay(policy: RetryPolicy, error: status.ServingError, attempt: int, deadline: float) -> float | None:
    if not policy.should_retry(error, attempt):
        return None
    delay = policy.backoff(attempt)
    if time.monotonic() + delay >= deadline:
        return None
    if policy.on_retry is not None:
        policy.on_retry(attempt, error, delay)
    return delay
