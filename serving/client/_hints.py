"""What the SDK adds to a server's refusal so the caller knows where the rule lives and what to do.

One function, ``with_hint``, used by both transports (``error_from_rpc``,
``error_from_http``): the server's own message is kept first, word for word.
"""
from __future__ import annotations

import re

from serving import status

__all__ = ["with_hint", "batch_size_hint"]

# TF Serving's wording (tensorflow/core/kernels/batching_util/shared_batch_scheduler.h).
_TASK_TOO_LARGE = re.compile(r"Task size (\d+) is larger than maximum input batch size (\d+)")


def batch_size_hint(max_batch_size: int) -> str:
    """Where a batching server's request cap is set, and the two ways past it."""
    return (f"the server batches with max_batch_size {max_batch_size} (its --batching_parameters_file, "
            "e.g. serving/batching.cpu.config under make up); split the request into batches of at most "
            f"{max_batch_size} rows, or raise max_batch_size")


def with_hint(error: status.ServingError) -> status.ServingError:
    """``error``, its details followed by a hint where the SDK knows one; else ``error`` itself."""
    if error.code != status.Code.INVALID_ARGUMENT:
        return error
    match = _TASK_TOO_LARGE.search(error.details)
    if match is None:
        return error
    return status.error_for(error.code, f"{error.details}; {batch_size_hint(int(match.group(2)))}")
