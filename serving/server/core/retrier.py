"""Retry a load as TF Serving's ``util/retrier.cc`` does: 1 + max_num_retries attempts."""
from __future__ import annotations

import logging
import threading
from typing import Callable, TypeVar

from serving import status

__all__ = ["retry"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def retry(description: str, max_num_retries: int, retry_interval_micros: int,
          fn: Callable[[], T], cancelled: threading.Event) -> T:
    """Call ``fn`` until it succeeds, at most ``1 + max_num_retries`` times.

    Waits ``retry_interval_micros`` between attempts; ``cancelled`` being set
    stops retrying (also during the wait). Raises the last attempt's
    ``status.ServingError`` (other exceptions become ``status.Internal``). An error whose
    ``retryable`` attribute is False (a quarantined version) ends the retries at once.
    """
    error: status.ServingError = status.Internal(f"{description} never ran")
    for attempt in range(max_num_retries + 1):
        if attempt > 0:
            if cancelled.wait(retry_interval_micros / 1e6):
                log.info("Retrying of %s was cancelled.", description)
                break
            log.info("Retrying of %s retry: %d", description, attempt)
        try:
            return fn()
        except status.ServingError as exc:
            error = exc
        except Exception as exc:  # a loader bug must not vanish silently
            error = status.Internal(f"{type(exc).__name__}: {exc}")
        log.error("%s failed: %s", description, error)
        if not getattr(error, "retryable", True):
            break
        if cancelled.is_set():
            log.info("Retrying of %s was cancelled.", description)
            break
    else:
        log.info("Retrying of %s exhausted max_num_retries: %d", description, max_num_retries)
    raise error
