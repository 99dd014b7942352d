"""A batch of tasks: merging their inputs, padding, one run, and handing each task its rows.

A task is one caller's ``dict[str, np.ndarray]`` whose tensors share
dimension 0, plus the ``TaskFuture`` that gets the task's rows of every output
(a lighter ``concurrent.futures.Future``: two plain locks, no condition
variable and no callbacks, since every task's future is made, settled and
waited on once per request).
``Batch.process`` is TF Serving's ``BatchingSession::ProcessBatch``: it
concatenates the tasks along dimension 0, pads to the next
``allowed_batch_sizes`` entry by repeating the first row of the last task
(``batching_session.cc`` ``MergeInputTensors``), runs once, checks that every
output has one row per padded input row, and hands every task its slice — or
the batch's exception (each future gets its own copy of a ``ServingError``).

With ``pad_variable_length_inputs`` each tensor is first padded up to the
batch's largest non-batch dims with its own first element (TF Serving's
``AddPadding``). ``split_task`` cuts a task too large for one batch into pieces
(``enable_large_batch_splitting``); a ``SplitJoin`` concatenates the pieces'
outputs back, in order, into the caller's future.

Metrics of a batch are recorded per batch (one ``record_queuing_latencies``
call for all its tasks); only ``record_input_batch_size`` stays per task, at
submit, as TF Serving records it (``BatchingSession::Run``).

Thread-safety: a ``Batch`` is filled under its queue's lock and processed by
one batch thread after it has left the queue; a ``SplitJoin`` is shared by the
threads running its pieces and locks itself; a ``TaskFuture`` is thread-safe.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError
from typing import Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

import numpy as np

from serving import status
from serving.server.batching.options import BatchingOptions

__all__ = [
    "Tensors",
    "BatchFn",
    "BatchKey",
    "BatchingMetrics",
    "SplitJoin",
    "Task",
    "TaskFuture",
    "Batch",
    "task_size",
    "batch_key",
    "split_task",
    "merge_inputs",
    "split_outputs",
]

Tensors = Dict[str, np.ndarray]
BatchFn = Callable[[Tensors], Mapping[str, np.ndarray]]
"""Runs one merged batch: ``inputs -> outputs``, each output with one row per input row."""

BatchKey = Tuple[Tuple[str, str, Union[int, Tuple[int, ...]]], ...]
"""Tasks may share a batch only when their keys are equal (see ``batch_key``)."""

# TF Serving's model server creates its batching sessions with thread_pool_name ""
# (batching_session.cc CreateBatchingSession, 2.17.1 and HEAD), so the real server
# exports queuing_latency{thread_pool_name=""} whatever the pool is called.
_QUEUING_LATENCY_POOL_LABEL = ""


class BatchingMetrics(Protocol):
    """TF Serving's ``batching_session`` metrics as the batcher records them (``ServerMetrics`` has them).

    Called from any thread, so implementations must be thread-safe.
    """

    def record_input_batch_size(self, size: int) -> None:
        """0th-dim size of one input tensor of a submitted task."""

    def record_queuing_latencies(self, thread_pool_name: str, latencies_us: Sequence[float]) -> None:
        """How long each task of a batch waited between submit and the batch starting."""

    def record_batch(self, processed_size: int, padding_size: int) -> None:
        """One merged batch: its size after padding, and how many padding rows it got."""

    def record_wrapped_run(self) -> None:
        """One run of the batch function on a merged batch."""


_PENDING, _RUNNING, _CANCELLED, _FINISHED = "PENDING", "RUNNING", "CANCELLED", "FINISHED"


class TaskFuture:
    """The outputs of one task: ``concurrent.futures.Future``'s waiting half, made cheap.

    Same meaning as ``Future`` for ``result``, ``exception``, ``done``,
    ``cancel``, ``cancelled`` and ``running`` (``concurrent.futures.CancelledError``,
    ``TimeoutError``); no done callbacks. The batch side calls
    ``set_running_or_notify_cancel`` once, then ``set_result`` or
    ``set_exception`` once. Thread-safe: ``cancel`` and ``set_running_or_notify_cancel``
    race on one non-blocking lock (whoever takes it first wins); waiters block
    on a second lock, held until the future is settled.
    """

    __slots__ = ("_started", "_settled", "_state", "_value", "_error", "opened_batch")

    def __init__(self) -> None:
        self.opened_batch = False  # set by the queue: the task opened its batch (it may lead it)
        self._started = threading.Lock()  # taken once: by the batch starting, or by cancel
        self._settled = threading.Lock()  # held until settled (finished or cancelled)
        self._settled.acquire()
        self._state = _PENDING
        self._value: Optional[Tensors] = None
        self._error: Optional[BaseException] = None

    def __repr__(self) -> str:
        return f"<TaskFuture {self._state.lower()}>"

    # -- caller side ------------------------------------------------------------------------
    def cancel(self) -> bool:
        """Cancel unless the task's batch has started; True if the future is (now) cancelled."""
        if self._started.acquire(False):
            self._state = _CANCELLED
            self._settled.release()
            return True
        return self._state == _CANCELLED

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def running(self) -> bool:
        return self._state == _RUNNING

    def done(self) -> bool:
        return self._state in (_CANCELLED, _FINISHED)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until settled or ``timeout`` seconds (None: no limit); whether it is settled."""
        if self._settled.acquire(True, -1 if timeout is None else max(0.0, timeout)):
            self._settled.release()  # let every other waiter through too
            return True
        return False

    def result(self, timeout: Optional[float] = None) -> Tensors:
        """The task's outputs; raises its error, ``CancelledError``, or ``TimeoutError``."""
        if not self.wait(timeout):
            raise TimeoutError()
        if self._state == _CANCELLED:
            raise CancelledError()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        """The task's error (None on success); ``CancelledError``/``TimeoutError`` as ``result``."""
        if not self.wait(timeout):
            raise TimeoutError()
        if self._state == _CANCELLED:
            raise CancelledError()
        return self._error

    # -- batch side -------------------------------------------------------------------------
    def set_running_or_notify_cancel(self) -> bool:
        """Mark running; False if the caller cancelled first (leave the task out)."""
        if self._started.acquire(False):
            self._state = _RUNNING
            return True
        return False

    def set_result(self, value: Tensors) -> None:
        self._value, self._state = value, _FINISHED
        self._settled.release()

    def set_exception(self, error: BaseException) -> None:
        self._error, self._state = error, _FINISHED
        self._settled.release()


class SplitJoin:
    """The pieces of one split task: resolves the caller's future once all are done."""

    def __init__(self, future: TaskFuture, pieces: int) -> None:
        self.future = future
        self.results: List[Optional[Mapping[str, np.ndarray]]] = [None] * pieces
        self.remaining = pieces
        self.claimed: Optional[bool] = None
        self.failed = False
        self.lock = threading.Lock()

    def claim(self) -> bool:
        with self.lock:
            if self.claimed is None:
                self.claimed = self.future.set_running_or_notify_cancel()
            return self.claimed and not self.failed

    def piece_done(self, index: int, outputs: Mapping[str, np.ndarray]) -> None:
        with self.lock:
            if self.failed:
                return
            self.results[index] = outputs
            self.remaining -= 1
            if self.remaining:
                return
        results = [r for r in self.results if r is not None]   # all of them: no piece remains
        try:
            names = results[0].keys()
            merged = {name: np.concatenate([r[name] for r in results], axis=0) for name in names}
        except ValueError as exc:  # pieces padded to different shapes
            self.piece_failed(status.Internal(f"Could not reassemble the outputs of a split task: {exc}"))
            return
        self.future.set_result(merged)

    def piece_failed(self, exc: BaseException) -> None:
        with self.lock:
            if self.failed:
                return
            self.failed = True
        self.future.set_exception(exc)


class Task:
    """One caller's inputs (or one piece of them, with ``join``) and the future for its outputs.

    ``waits``: the caller blocks on the future (``submit(caller_waits=True)``); for a split task
    only its last piece says so, so that the caller is counted once.
    """

    __slots__ = ("inputs", "size", "key", "enqueued", "future", "join", "index", "waits")

    def __init__(self, inputs: Tensors, size: int, key: BatchKey, enqueued: float,
                 future: TaskFuture, join: Optional[SplitJoin] = None, index: int = 0,
                 waits: bool = False) -> None:
        self.inputs, self.size, self.key, self.enqueued = inputs, size, key, enqueued
        self.future, self.join, self.index, self.waits = future, join, index, waits

    def claim(self) -> bool:
        """False when the caller cancelled (or a sibling piece failed): leave it out."""
        if self.join is not None:
            return self.join.claim()
        return self.future.set_running_or_notify_cancel()

    def succeed(self, outputs: Tensors) -> None:
        if self.join is not None:
            self.join.piece_done(self.index, outputs)
        else:
            self.future.set_result(outputs)

    def fail(self, exc: BaseException) -> None:
        exc = _copy_error(exc)
        if self.join is not None:
            self.join.piece_failed(exc)
        else:
            self.future.set_exception(exc)


class Batch:
    """Tasks of one key that run together; ``started`` is when the first one was enqueued."""

    __slots__ = ("tasks", "size", "key", "started")

    def __init__(self) -> None:
        self.tasks: List[Task] = []
        self.size = 0
        self.key: Optional[BatchKey] = None
        self.started = 0.0

    def fits(self, key: BatchKey, size: int, limit: int) -> bool:
        """Whether a task of ``key`` and ``size`` rows may join without exceeding ``limit`` rows."""
        return not self.tasks or (self.key == key and self.size + size <= limit)

    def add(self, task: Task) -> None:
        if not self.tasks:
            self.started, self.key = task.enqueued, task.key
        self.tasks.append(task)
        self.size += task.size

    def process(self, run: BatchFn, options: BatchingOptions, metrics: Optional[BatchingMetrics]) -> None:
        """Run the tasks not cancelled as one merged batch; every task gets its rows or the error.

        Called on a batch thread once the batch has left its queue. Never raises:
        the batch's failure belongs to its tasks.
        """
        dequeued = time.monotonic()
        if metrics is not None:
            metrics.record_queuing_latencies(_QUEUING_LATENCY_POOL_LABEL,
                                             [(dequeued - task.enqueued) * 1e6 for task in self.tasks])
        tasks = [task for task in self.tasks if task.claim()]
        if not tasks:
            return
        try:
            merged, padded = merge_inputs(tasks, options.allowed_batch_sizes, options.pad_variable_length_inputs)
            if metrics is not None:
                metrics.record_batch(padded, padded - self.size if len(tasks) == len(self.tasks)
                                     else padded - sum(t.size for t in tasks))
            try:
                outputs = run(merged)
            finally:
                if metrics is not None:
                    metrics.record_wrapped_run()
            pieces = split_outputs(outputs, [t.size for t in tasks], padded)
        except Exception as exc:  # the batch's failure belongs to its tasks, not to the thread
            for task in tasks:
                task.fail(exc)
            return
        for task, piece in zip(tasks, pieces):
            task.succeed(piece)


def _copy_error(exc: BaseException) -> BaseException:
    """Each future gets its own ServingError (same code and details), chained to the original."""
    if isinstance(exc, status.ServingError):
        copy = status.error_for(exc.code, exc.details)
        copy.__cause__ = exc
        return copy
    return exc


def task_size(inputs: Mapping[str, np.ndarray]) -> int:
    """The shared 0th-dim size, with TF Serving's ``ComputeTensorBatchSize`` messages."""
    if not inputs:
        raise status.InvalidArgument("Batching Run() must have at least one input tensor")
    sizes = set()
    for array in inputs.values():
        if array.ndim == 0:
            raise status.InvalidArgument("Batching Run() input tensors must have at least one dimension")
        sizes.add(array.shape[0])
    if len(sizes) > 1:
        raise status.InvalidArgument("Batching Run() input tensors must have equal 0th-dimension size")
    return sizes.pop()


def batch_key(inputs: Mapping[str, np.ndarray], pad_variable_length: bool) -> BatchKey:
    """Names and dtypes, plus non-batch dims (or, when padding variable lengths, only ranks)."""
    items = inputs.items() if len(inputs) == 1 else sorted(inputs.items())
    if pad_variable_length:
        return tuple([(name, a.dtype.str, a.ndim) for name, a in items])
    return tuple([(name, a.dtype.str, a.shape[1:]) for name, a in items])


def split_task(task: Task, first_piece: int, limit: int) -> List[Task]:
    """Large-batch splitting: ``task`` as a piece of ``first_piece`` rows (0: none), then pieces of
    at most ``limit`` rows; their outputs join back, in order, into ``task.future``."""
    bounds = ([0, first_piece] if first_piece else [0]) + list(range(first_piece + limit, task.size, limit))
    bounds.append(task.size)
    join = SplitJoin(task.future, len(bounds) - 1)
    last = len(bounds) - 2
    return [Task({name: array[start:stop] for name, array in task.inputs.items()}, stop - start, task.key,
                 task.enqueued, task.future, join, index, task.waits and index == last)
            for index, (start, stop) in enumerate(zip(bounds, bounds[1:]))]


def _round_up(allowed: Sequence[int], size: int) -> int:
    """``RoundToLowestAllowedBatchSize``: the smallest allowed size ≥ ``size``."""
    for candidate in allowed:
        if candidate >= size:
            return candidate
    return size


def _pad_to(array: np.ndarray, dims: Sequence[int]) -> np.ndarray:
    """TF Serving's ``AddPadding``: grow dims 1.. to ``dims``, filling with the first element."""
    widths = [(0, 0)] + [(0, want - have) for have, want in zip(array.shape[1:], dims)]
    if not any(after for _, after in widths):
        return array
    if array.size == 0:
        raise status.InvalidArgument("Cannot pad an empty tensor: it has no first element to pad with")
    return np.pad(array, widths, mode="constant", constant_values=array.flat[0])


def merge_inputs(tasks: Sequence[Task], allowed: Sequence[int], pad_variable_length: bool) -> Tuple[Tensors, int]:
    """Concatenate along dim 0 and pad rows up to the next allowed size; returns (inputs, padded size)."""
    size = sum(t.size for t in tasks)
    padded = _round_up(allowed, size)
    merged: Tensors = {}
    for name in tasks[0].inputs:
        arrays = [t.inputs[name] for t in tasks]
        if pad_variable_length:
            dims = np.max([a.shape[1:] for a in arrays], axis=0) if arrays[0].ndim > 1 else ()
            arrays = [_pad_to(a, dims) for a in arrays]
        if padded > size:
            source = next((a for a in reversed(arrays) if len(a)), arrays[-1])
            row = source[:1] if len(source) else np.zeros((1,) + source.shape[1:], source.dtype)
            arrays.append(np.repeat(row, padded - size, axis=0))
        merged[name] = arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=0)
    return merged, padded


def split_outputs(outputs: Mapping[str, np.ndarray], sizes: Sequence[int], padded: int) -> List[Tensors]:
    """One dict of row slices per task; Internal error unless every output has ``padded`` rows."""
    if not isinstance(outputs, dict) and not isinstance(outputs, Mapping):  # dict first: a cheap check
        raise status.Internal(f"The batch function must return a dict of tensors; got {type(outputs).__name__}")
    arrays = {name: np.asarray(value) for name, value in outputs.items()}
    for name, array in arrays.items():
        if array.ndim == 0 or array.shape[0] != padded:
            got = "0 dimensions" if array.ndim == 0 else f"0th dimension {array.shape[0]}"
            raise status.Internal(
                "Batched output tensor's 0th dimension does not equal the sum of the 0th dimension sizes "
                f"of the input tensors: output '{name}' has {got}, expected {padded}")
    if len(sizes) == 1 and sizes[0] == padded:  # one task and no padding: its outputs as they are
        return [arrays]
    pieces, start = [], 0
    for size in sizes:
        pieces.append({name: array[start:start + size] for name, array in arrays.items()})
        start += size
    return pieces
