"""``BatchingOptions``: TF Serving's ``BatchingParameters`` as frozen, typed data.

Defaults are TF's (``SharedBatchScheduler`` and ``BatchingSession``); invalid
values raise ``status.InvalidArgument`` with TF Serving's wording
(``batching_session.cc``, ``shared_batch_scheduler.h``). ``from_proto`` reads a
``tensorflow.serving.BatchingParameters`` (``--batching_parameters_file``).
Immutable, so it may be shared by any number of threads.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Optional, Tuple

from google.protobuf.message import Message

from serving import status

__all__ = ["BatchingOptions"]

# BatchingParameters fields that are wrapper messages (``HasField`` tells set from unset).
_WRAPPED_FIELDS = ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches", "num_batch_threads",
                   "thread_pool_name", "enable_large_batch_splitting", "max_execution_batch_size")


def _default_num_batch_threads() -> int:
    """TF's ``port::MaxParallelism()``: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclasses.dataclass(frozen=True)
class BatchingOptions:
    """``BatchingParameters`` as typed data, with TF's defaults; invalid values raise
    ``status.InvalidArgument`` with TF Serving's wording."""

    max_batch_size: int = 1000
    batch_timeout_micros: int = 0
    max_enqueued_batches: int = 10
    num_batch_threads: int = dataclasses.field(default_factory=_default_num_batch_threads)
    thread_pool_name: str = "model_server_batch_threads"
    allowed_batch_sizes: Tuple[int, ...] = ()
    pad_variable_length_inputs: bool = False
    enable_large_batch_splitting: bool = False
    max_execution_batch_size: Optional[int] = None  # splitting only; None means max_batch_size

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed_batch_sizes", tuple(int(s) for s in self.allowed_batch_sizes))
        _validate(self)

    @property
    def execution_batch_size(self) -> int:
        """The largest batch handed to the model."""
        if self.enable_large_batch_splitting and self.max_execution_batch_size is not None:
            return self.max_execution_batch_size
        return self.max_batch_size

    @property
    def batch_timeout_seconds(self) -> float:
        """``batch_timeout_micros`` in seconds."""
        return self.batch_timeout_micros / 1e6

    @classmethod
    def from_proto(cls, params: Message) -> "BatchingOptions":
        """From a ``tensorflow.serving.BatchingParameters``; unset fields keep TF's defaults."""
        set_fields = {field: getattr(params, field).value for field in _WRAPPED_FIELDS if params.HasField(field)}
        return cls(allowed_batch_sizes=tuple(params.allowed_batch_sizes),
                   pad_variable_length_inputs=bool(params.pad_variable_length_inputs),
                   **set_fields)


def _validate(options: BatchingOptions) -> None:
    """TF Serving's checks of ``BatchingParameters``; the first broken rule raises ``InvalidArgument``."""
    def fail(message: str) -> None:
        raise status.InvalidArgument(message)

    if options.num_batch_threads < 1:
        fail(f"num_batch_threads must be positive; was {options.num_batch_threads}")
    if options.max_batch_size < 1:
        fail(f"max_batch_size must be positive; was {options.max_batch_size}")
    if options.batch_timeout_micros < 0:
        fail(f"batch_timeout_micros must be non-negative; was {options.batch_timeout_micros}")
    if options.max_enqueued_batches < 0:
        fail(f"max_enqueued_batches must be non-negative; was {options.max_enqueued_batches}")
    execution = options.execution_batch_size
    if not 1 <= execution <= options.max_batch_size:
        fail(f"max_execution_batch_size must be between 1 and max_batch_size {options.max_batch_size}; "
             f"was {execution}")
    sizes = options.allowed_batch_sizes
    if not sizes:
        return
    if any(b <= a for a, b in zip(sizes, sizes[1:])) or sizes[0] < 1:
        fail(f"allowed_batch_sizes entries must be positive and monotonically increasing; were {list(sizes)}")
    if sizes[-1] != options.max_batch_size:
        fail(f"Last entry in allowed_batch_sizes must match max_batch_size; last entry was {sizes[-1]}; "
             f"expected {options.max_batch_size}")
    if sizes[-1] != execution:
        fail(f"Last entry in allowed_batch_sizes must be equal to max_execution_batch_size; last entry was "
             f"{sizes[-1]}; expected {execution}")
