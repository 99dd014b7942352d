"""Memory admission: refuse, before it runs, a request whose projected memory is over a budget.

TF Serving has no such limit (its only bound is batching's ``max_batch_size``);
this is the embedded server's own protection. A request's cost is not what it
decodes to: a 50-byte Predict of one float broadcast to ``[500000, 8, 8, 1]``
decodes to a view, then the model's first convolution makes 32 times its
input. So each servable's memory per row is measured while it loads:

- ``MemoryProfile``: per signature, the peak resident memory of a run as a
  line in its rows, ``fixed_bytes + bytes_per_row x rows``, fitted through the
  smallest and the largest batch its warmup replayed
  (``serving.server.tensorflow.warmup`` measures them with
  ``serving.server.memory.peak_rss_during``: ``VmHWM`` reset before the run,
  after ``malloc_trim``).
- ``RequestCost``: a request's rows (its inputs' batch dimension, or its
  tf.Examples) and input bytes, counted as TensorFlow will hold them (strings
  by their bytes plus TensorFlow's per-string header, broadcast values once
  per element, each tf.Example with the context copied into it), and the
  projected peak: ``fixed + per row x rows + input bytes``. A signature the
  warmup did not measure (no warmup file, or warmup off) is projected as
  ``UNMEASURED_INPUT_FACTOR`` x its input bytes: a guess that knows nothing of
  the model, so the in-flight budget is then the bound that matters.
- ``MemoryAdmission``: the per-request budget (over it: INVALID_ARGUMENT, the
  request can never run) and the budget of all admitted requests together
  (over it: RESOURCE_EXHAUSTED, retry later). After a request projected at
  ``release_after_bytes`` or more, the free heap goes back to the OS
  (``malloc_trim``), as after a load.

Thread-safety: ``MemoryAdmission.admit`` may be called from any thread;
profiles and costs are immutable.
"""
from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Mapping, Optional, Sequence

import numpy as np

from serving import status
from serving.server.memory import release_free_memory

if TYPE_CHECKING:
    from numpy.typing import ArrayLike
    from tensorflow_serving.apis import input_pb2

__all__ = [
    "TF_STRING_HEADER_BYTES",
    "UNMEASURED_INPUT_FACTOR",
    "DEFAULT_RELEASE_AFTER_BYTES",
    "LineFit",
    "MemoryProfile",
    "RequestCost",
    "MemoryAdmission",
    "array_bytes",
    "predict_cost",
    "examples_cost",
    "format_bytes",
]

TF_STRING_HEADER_BYTES = 24   # sizeof(tensorflow::tstring): every string element has one, long ones a heap copy too
UNMEASURED_INPUT_FACTOR = 8
DEFAULT_RELEASE_AFTER_BYTES = 64 << 20


def format_bytes(count: float) -> str:
    """``count`` bytes for a message: ``8.1 GiB (8697308160 bytes)``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(count) >= size:
            return f"{count / size:.1f} {unit} ({int(count)} bytes)"
    return f"{int(count)} bytes"


@dataclass(frozen=True)
class LineFit:
    """Peak bytes of one signature's run as ``fixed_bytes + bytes_per_row x rows`` (both >= 0)."""

    fixed_bytes: int
    bytes_per_row: int
    measured_rows: tuple[int, ...]

    @classmethod
    def through(cls, points: Sequence[tuple[int, int]]) -> "LineFit":
        """The line through the fewest and the most rows measured (``(rows, peak bytes)`` pairs).

        One batch size only, or more rows measured as no more memory (noise
        of a small model): the line through the origin and the largest batch's
        peak, i.e. its peak per row, which over-projects rather than under.
        """
        low, high = min(points), max(points)
        per_row = (high[1] - low[1]) / (high[0] - low[0]) if high[0] != low[0] else 0.0
        if per_row <= 0:
            return cls(0, math.ceil(high[1] / max(1, high[0])), (high[0],))
        fixed = max(0.0, low[1] - per_row * low[0])
        return cls(int(fixed), math.ceil(per_row), (low[0], high[0]))

    def project(self, rows: int) -> int:
        return self.fixed_bytes + self.bytes_per_row * rows


@dataclass(frozen=True)
class MemoryProfile:
    """What warmup measured of one servable: a ``LineFit`` per signature key."""

    signatures: Mapping[str, LineFit]


@dataclass(frozen=True)
class RequestCost:
    """A request's rows, input bytes and projected peak bytes, and how the projection was made."""

    rows: int
    input_bytes: int
    projected_bytes: int
    how: str

    @classmethod
    def project(cls, profile: Optional[MemoryProfile], signature: str, rows: int, input_bytes: int) -> "RequestCost":
        fit = profile.signatures.get(signature) if profile is not None else None
        if fit is None:
            return cls(rows, input_bytes, UNMEASURED_INPUT_FACTOR * input_bytes,
                       f"{UNMEASURED_INPUT_FACTOR} x {format_bytes(input_bytes)} of inputs; the model's memory "
                       "per row was not measured (no warmup)")
        how = (f"{rows} rows x {format_bytes(fit.bytes_per_row)} per row measured at warmup"
               f" + {format_bytes(fit.fixed_bytes)} + {format_bytes(input_bytes)} of inputs")
        return cls(rows, input_bytes, fit.project(rows) + input_bytes, how)


def array_bytes(array: np.ndarray) -> int:
    """The bytes TensorFlow holds for ``array`` as a tensor, without materialising a broadcast view.

    Numbers: elements x item size. Strings: per element its bytes plus
    ``TF_STRING_HEADER_BYTES``; along broadcast axes (stride 0) the one
    value is counted once per element it fills.
    """
    if array.dtype != object:
        return int(array.size) * array.itemsize
    if array.size == 0:
        return 0
    repeated = math.prod(n for n, stride in zip(array.shape, array.strides) if stride == 0)
    distinct = array[tuple(0 if stride == 0 else slice(None) for stride in array.strides)]
    text = sum(len(v) if isinstance(v, (bytes, bytearray)) else len(str(v).encode("utf-8"))
               for v in np.asarray(distinct).reshape(-1))
    return repeated * text + int(array.size) * TF_STRING_HEADER_BYTES


def predict_cost(profile: Optional[MemoryProfile], signature: str, inputs: Mapping[str, ArrayLike]) -> RequestCost:
    """A Predict's cost: rows are the largest batch dimension (a scalar is one row)."""
    arrays = [value if isinstance(value, np.ndarray) else np.asarray(value) for value in inputs.values()]
    rows = max((int(a.shape[0]) if a.ndim else 1 for a in arrays), default=0)
    return RequestCost.project(profile, signature, rows, sum(array_bytes(a) for a in arrays))


def examples_cost(profile: Optional[MemoryProfile], signature: str, input_proto: input_pb2.Input) -> RequestCost:
    """A Classify/Regress cost from a ``tensorflow.serving.Input``, before its examples are serialized.

    With ``example_list_with_context`` every example carries a copy of the
    context (``serving.server.tensorflow.inference.serialized_examples``).
    """
    kind = input_proto.WhichOneof("kind")
    if kind == "example_list":
        examples, context = input_proto.example_list.examples, 0
    elif kind == "example_list_with_context":
        examples = input_proto.example_list_with_context.examples
        context = input_proto.example_list_with_context.context.ByteSize()
    else:
        return RequestCost.project(profile, signature, 0, 0)
    rows = len(examples)
    total = rows * (context + TF_STRING_HEADER_BYTES) + sum(e.ByteSize() for e in examples)
    return RequestCost.project(profile, signature, rows, total)


class MemoryAdmission:
    """The per-request and in-flight memory budgets (None: no limit), and the memory given back after."""

    def __init__(self, per_request_bytes: Optional[int], in_flight_bytes: Optional[int], *,
                 release_after_bytes: int = DEFAULT_RELEASE_AFTER_BYTES) -> None:
        self.per_request_bytes = per_request_bytes
        self.in_flight_bytes = in_flight_bytes
        self.release_after_bytes = release_after_bytes
        self._lock = threading.Lock()
        self.admitted_bytes = 0

    @contextlib.contextmanager
    def admit(self, model: str, cost: RequestCost) -> Iterator[None]:
        """Hold ``cost`` while the enclosed run goes; refuse it first if it is over a budget."""
        projected = cost.projected_bytes
        if self.per_request_bytes is not None and projected > self.per_request_bytes:
            raise status.InvalidArgument(
                f"Request to model {model} needs an estimated {format_bytes(projected)} of memory to run "
                f"({cost.how}), more than the limit of {format_bytes(self.per_request_bytes)} per request "
                "(embedded server flag --max_request_memory_bytes)")
        with self._lock:
            held = self.admitted_bytes
            if self.in_flight_bytes is not None and held and held + projected > self.in_flight_bytes:
                raise status.ResourceExhausted(
                    f"Requests in flight would need an estimated {format_bytes(held + projected)} of memory "
                    f"({format_bytes(held)} admitted + {format_bytes(projected)} for this request to model "
                    f"{model}), more than the limit of {format_bytes(self.in_flight_bytes)} "
                    "(embedded server flag --max_in_flight_memory_bytes)")
            self.admitted_bytes = held + projected
        try:
            yield
        finally:
            with self._lock:
                self.admitted_bytes -= projected
            if projected >= self.release_after_bytes:
                release_free_memory()
