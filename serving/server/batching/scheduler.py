"""Server-side request batching with TF Serving's ``BatchingParameters`` semantics.

``BatchScheduler`` is TF's ``SharedBatchScheduler``: one pool of
``num_batch_threads`` threads shared, round-robin, by many ``BatchQueue``\\ s
(the server makes one queue per model version and signature). Each queue is
TF Serving's ``BatchingSession`` for one signature: tasks are
``dict[str, np.ndarray]`` sharing dimension 0; a batch concatenates them along
dimension 0, pads to the next ``allowed_batch_sizes`` entry by repeating the
first row of the last task (``batching_session.cc`` ``MergeInputTensors``),
runs once, checks that every output has one row per padded input row, and
hands every task's future its slice — or the batch's exception.

Queue rules (``shared_batch_scheduler.h``):

- the open (newest) batch takes tasks until one does not fit in
  ``max_batch_size`` (``max_execution_batch_size`` when splitting); then it is
  closed and a new one opened — unless the queue already holds
  ``max_enqueued_batches`` batches, in which case ``submit`` raises
  ``Unavailable("The batch scheduling queue to which this task was submitted is full")``
  at once;
- a free thread takes the oldest closed batch, or the open batch once it is
  full or its first task has waited ``batch_timeout_micros`` (0: at once);
- a task with more rows than ``max_batch_size`` is rejected with
  ``InvalidArgument("Task size N is larger than maximum input batch size M")``;
  with ``enable_large_batch_splitting`` a task that does not fit the open batch
  is split into pieces of at most ``max_execution_batch_size`` rows, which
  fill the open batch and the next ones; its future gets the pieces' outputs
  concatenated back in order;
- tasks whose inputs differ in names, dtypes or non-batch dimensions never
  share a batch: the open batch is closed and the task starts a new one. With
  ``pad_variable_length_inputs`` tasks only need equal names, dtypes and ranks;
  each tensor is padded up to the batch's largest dims with its own first
  element (TF Serving's ``AddPadding``).

Differences from TF Serving, on purpose: outputs without one row per padded
input row fail the batch with ``Internal`` (TF: ``FailedPrecondition``, same
wording); tasks of different shapes get separate batches (TF merges them and
fails the whole batch); a cancelled future leaves its batch (TF has per-task
deadlines instead).

Thread-safety: ``submit`` may be called from any number of threads. Lifecycle:
``start()`` launches the threads; ``stop()`` closes every queue, runs every
task already accepted (each future gets a result or an exception) and joins the
threads. ``submit`` on a scheduler that is not running raises ``Unavailable``.
A future cancelled before its batch starts is left out of the batch.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import os
import threading
import time
from concurrent.futures import Future
from typing import Callable, Deque, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from serving import status

__all__ = [
    "BatchFn",
    "BatchingOptions",
    "BatchQueue",
    "BatchScheduler",
    "QUEUE_FULL_MESSAGE",
]

logger = logging.getLogger(__name__)

Tensors = Dict[str, np.ndarray]
BatchFn = Callable[[Tensors], Mapping[str, np.ndarray]]

QUEUE_FULL_MESSAGE = "The batch scheduling queue to which this task was submitted is full"

# TF Serving's model server creates its batching sessions with thread_pool_name ""
# (batching_session.cc CreateBatchingSession, 2.17.1 and HEAD), so the real server
# exports queuing_latency{thread_pool_name=""} whatever the pool is called.
_QUEUING_LATENCY_POOL_LABEL = ""


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

    @classmethod
    def from_proto(cls, params) -> "BatchingOptions":
        """From a ``tensorflow.serving.BatchingParameters``; unset fields keep TF's defaults."""
        kwargs = {}
        for field in ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches",
                      "num_batch_threads", "thread_pool_name", "enable_large_batch_splitting",
                      "max_execution_batch_size"):
            if params.HasField(field):
                kwargs[field] = getattr(params, field).value
        kwargs["allowed_batch_sizes"] = tuple(params.allowed_batch_sizes)
        kwargs["pad_variable_length_inputs"] = params.pad_variable_length_inputs
        return cls(**kwargs)


def _validate(options: BatchingOptions) -> None:
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


# ---------------------------------------------------------------------------------------------
# Tasks, and the join that reassembles a split task.

class _SplitJoin:
    """The pieces of one split task: resolves the caller's future once all are done."""

    def __init__(self, future: Future, pieces: int) -> None:
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
        try:
            names = self.results[0].keys()
            merged = {name: np.concatenate([r[name] for r in self.results], axis=0) for name in names}
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


class _Task:
    __slots__ = ("inputs", "size", "key", "enqueued", "future", "join", "index")

    def __init__(self, inputs: Tensors, size: int, key: tuple, enqueued: float,
                 future: Future, join: Optional[_SplitJoin] = None, index: int = 0) -> None:
        self.inputs, self.size, self.key, self.enqueued = inputs, size, key, enqueued
        self.future, self.join, self.index = future, join, index

    def claim(self) -> bool:
        """False when the caller cancelled (or a sibling piece failed): leave it out."""
        if self.join is not None:
            return self.join.claim()
        return self.future.set_running_or_notify_cancel()

    def succeed(self, outputs: Dict[str, np.ndarray]) -> None:
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


class _Batch:
    __slots__ = ("tasks", "size", "key", "started")

    def __init__(self) -> None:
        self.tasks: List[_Task] = []
        self.size = 0
        self.key: Optional[tuple] = None
        self.started = 0.0

    def add(self, task: _Task, now: float) -> None:
        if not self.tasks:
            self.started, self.key = now, task.key
        self.tasks.append(task)
        self.size += task.size


def _copy_error(exc: BaseException) -> BaseException:
    """Each future gets its own ServingError (same code and details), chained to the original."""
    if isinstance(exc, status.ServingError):
        copy = status.error_for(exc.code, exc.details)
        copy.__cause__ = exc
        return copy
    return exc


# ---------------------------------------------------------------------------------------------
# Merging inputs and splitting outputs.

def _task_size(inputs: Mapping[str, np.ndarray]) -> int:
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


def _batch_key(inputs: Mapping[str, np.ndarray], pad_variable_length: bool) -> tuple:
    """Tasks may share a batch only when their keys are equal."""
    if pad_variable_length:
        return tuple(sorted((name, a.dtype.str, a.ndim) for name, a in inputs.items()))
    return tuple(sorted((name, a.dtype.str, a.shape[1:]) for name, a in inputs.items()))


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


def _merge(tasks: Sequence[_Task], allowed: Sequence[int], pad_variable_length: bool) -> Tuple[Tensors, int]:
    """Concatenate along dim 0 and pad rows up to the next allowed size."""
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


def _split(outputs: Mapping[str, np.ndarray], sizes: Sequence[int], padded: int) -> List[Tensors]:
    """One dict of row slices per task; Internal error unless every output has ``padded`` rows."""
    if not isinstance(outputs, Mapping):
        raise status.Internal(f"The batch function must return a dict of tensors; got {type(outputs).__name__}")
    arrays = {name: np.asarray(value) for name, value in outputs.items()}
    for name, array in arrays.items():
        if array.ndim == 0 or array.shape[0] != padded:
            got = "0 dimensions" if array.ndim == 0 else f"0th dimension {array.shape[0]}"
            raise status.Internal(
                "Batched output tensor's 0th dimension does not equal the sum of the 0th dimension sizes "
                f"of the input tensors: output '{name}' has {got}, expected {padded}")
    pieces, start = [], 0
    for size in sizes:
        pieces.append({name: array[start:start + size] for name, array in arrays.items()})
        start += size
    return pieces


# ---------------------------------------------------------------------------------------------
# Queues and the scheduler.

class BatchQueue:
    """One batching queue (one model version + signature); made by ``BatchScheduler.queue``.

    ``submit`` is thread-safe. ``close()`` stops accepting tasks, waits until
    every accepted task has been processed, and removes the queue from its
    scheduler; it is idempotent.
    """

    def __init__(self, scheduler: "BatchScheduler", run: BatchFn, name: str) -> None:
        self._scheduler = scheduler
        self._options = scheduler.options
        self._run = run
        self.name = name
        self._batches: Deque[_Batch] = collections.deque([_Batch()])
        self._in_flight = 0
        self._closed = False

    def __repr__(self) -> str:
        return f"BatchQueue({self.name!r})"

    def submit(self, inputs: Mapping[str, np.ndarray]) -> "Future[Dict[str, np.ndarray]]":
        """Queue one task; its future gets this task's rows of every output.

        Raises at once (never blocks): ``InvalidArgument`` for malformed or
        too-large tasks, ``Unavailable`` when the queue is full, closed, or its
        scheduler is not running.
        """
        options = self._options
        inputs = {name: value if isinstance(value, np.ndarray) else np.asarray(value)
                  for name, value in inputs.items()}
        size = _task_size(inputs)
        metrics = self._scheduler.metrics
        if metrics is not None:
            for _ in inputs:
                metrics.record_input_batch_size(size)
        if size > options.max_batch_size:
            raise status.InvalidArgument(
                f"Task size {size} is larger than maximum input batch size {options.max_batch_size}")
        key = _batch_key(inputs, options.pad_variable_length_inputs)
        future: Future = Future()
        with self._scheduler._cond:
            self._scheduler._check_running_locked()
            if self._closed:
                raise status.Unavailable(f"Batch scheduling queue {self.name} is closed")
            now = time.monotonic()
            if options.enable_large_batch_splitting:
                self._enqueue_split_locked(inputs, size, key, now, future)
            else:
                self._enqueue_locked(_Task(inputs, size, key, now, future), now)
            if len(self._batches) > 1 or self._open_schedulable_locked(now) or (
                    options.batch_timeout_micros and len(self._batches[-1].tasks) == 1):
                self._scheduler._cond.notify()
        return future

    def close(self) -> None:
        """Stop accepting tasks and wait until every accepted one has been processed."""
        self._scheduler._close_queue(self)

    # -- under the scheduler's lock ---------------------------------------------------------
    def _fits_open_locked(self, key: tuple, size: int) -> bool:
        open_batch = self._batches[-1]
        return not open_batch.tasks or (
            open_batch.key == key and open_batch.size + size <= self._options.execution_batch_size)

    def _enqueue_locked(self, task: _Task, now: float) -> None:
        if not self._fits_open_locked(task.key, task.size):
            if len(self._batches) >= self._options.max_enqueued_batches:
                raise status.Unavailable(QUEUE_FULL_MESSAGE)
            self._batches.append(_Batch())
        self._batches[-1].add(task, now)

    def _enqueue_split_locked(self, inputs: Tensors, size: int, key: tuple, now: float,
                              future: Future) -> None:
        limit = self._options.execution_batch_size
        open_batch = self._batches[-1]
        room = limit - open_batch.size if (not open_batch.tasks or open_batch.key == key) else 0
        if size <= room and self._fits_open_locked(key, size):
            self._batches[-1].add(_Task(inputs, size, key, now, future), now)
            return
        capacity = (self._options.max_enqueued_batches - len(self._batches)) * limit + room
        if size > capacity:
            raise status.Unavailable(QUEUE_FULL_MESSAGE)
        bounds = ([0, room] if room else [0]) + list(range(room + limit, size, limit)) + [size]
        join = _SplitJoin(future, len(bounds) - 1)
        for index, (start, stop) in enumerate(zip(bounds, bounds[1:])):
            piece = {name: array[start:stop] for name, array in inputs.items()}
            if not self._fits_open_locked(key, stop - start):
                self._batches.append(_Batch())
            self._batches[-1].add(_Task(piece, stop - start, key, now, future, join, index), now)

    def _open_schedulable_locked(self, now: float) -> bool:
        open_batch = self._batches[-1]
        if not open_batch.tasks:
            return False
        return (self._closed or open_batch.size >= self._options.execution_batch_size
                or now >= open_batch.started + self._options.batch_timeout_micros / 1e6)

    def _take_batch_locked(self, now: float) -> Optional[_Batch]:
        if len(self._batches) == 1 and self._open_schedulable_locked(now):
            self._batches.append(_Batch())
        if len(self._batches) < 2:
            return None
        self._in_flight += 1
        return self._batches.popleft()

    def _deadline_locked(self) -> Optional[float]:
        open_batch = self._batches[-1]
        if len(self._batches) > 1 or not open_batch.tasks:
            return None
        return open_batch.started + self._options.batch_timeout_micros / 1e6

    def _empty_locked(self) -> bool:
        return self._in_flight == 0 and len(self._batches) == 1 and not self._batches[0].tasks

    # -- on a batch thread ------------------------------------------------------------------
    def _process(self, batch: _Batch) -> None:
        options, metrics = self._options, self._scheduler.metrics
        dequeued = time.monotonic()
        if metrics is not None:
            for task in batch.tasks:
                metrics.record_queuing_latency(_QUEUING_LATENCY_POOL_LABEL, (dequeued - task.enqueued) * 1e6)
        tasks = [task for task in batch.tasks if task.claim()]
        if not tasks:
            return
        try:
            merged, padded = _merge(tasks, options.allowed_batch_sizes, options.pad_variable_length_inputs)
            if metrics is not None:
                metrics.record_batch(padded, padded - sum(t.size for t in tasks))
            try:
                outputs = self._run(merged)
            finally:
                if metrics is not None:
                    metrics.record_wrapped_run()
            pieces = _split(outputs, [t.size for t in tasks], padded)
        except Exception as exc:  # the batch's failure belongs to its tasks, not to the thread
            for task in tasks:
                task.fail(exc)
            return
        for task, piece in zip(tasks, pieces):
            task.succeed(piece)


class BatchScheduler:
    """TF's ``SharedBatchScheduler``: ``num_batch_threads`` threads shared by all queues.

    Threads take batches from the queues round-robin, so a busy queue cannot
    starve the others. ``metrics`` (a ``ServerMetrics``) receives TF Serving's
    ``batching_session`` metrics, labelled as the real server labels them
    (``queuing_latency{thread_pool_name=""}``). Lifecycle: ``start()`` once, ``stop()`` once
    (idempotent; drains every queue first). Thread-safe.
    """

    def __init__(self, options: Optional[BatchingOptions] = None, metrics=None) -> None:
        self.options = options if options is not None else BatchingOptions()
        self.metrics = metrics
        self._cond = threading.Condition()
        self._queues: List[BatchQueue] = []
        self._next = 0
        self._threads: List[threading.Thread] = []
        self._state = "new"  # new -> running -> stopping -> stopped

    def queue(self, run: BatchFn, name: str) -> BatchQueue:
        """A new queue whose batches go to ``run`` (called on a batch thread, one batch at a time
        per thread; it must be thread-safe if ``num_batch_threads`` > 1)."""
        with self._cond:
            if self._state in ("stopping", "stopped"):
                raise status.Unavailable("The batch scheduler has been stopped")
            queue = BatchQueue(self, run, name)
            self._queues.append(queue)
        return queue

    def start(self) -> "BatchScheduler":
        """Launch the batch threads (named ``<thread_pool_name>_<i>``)."""
        with self._cond:
            if self._state != "new":
                raise RuntimeError(f"BatchScheduler.start() called when {self._state}")
            self._state = "running"
        for index in range(self.options.num_batch_threads):
            thread = threading.Thread(target=self._thread_logic, daemon=True,
                                      name=f"{self.options.thread_pool_name}_{index}")
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Close every queue, process every accepted task, then join the threads."""
        with self._cond:
            if self._state in ("stopping", "stopped"):
                return
            if self._state == "new":  # nothing can have been accepted
                self._state = "stopped"
                return
            self._state = "stopping"
            for queue in self._queues:
                queue._closed = True
            self._cond.notify_all()
            while self._queues and not all(q._empty_locked() for q in self._queues):
                self._cond.wait(0.1)
            self._queues.clear()
            self._state = "stopped"
            self._cond.notify_all()
        for thread in self._threads:
            thread.join()
        self._threads.clear()

    def __enter__(self) -> "BatchScheduler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- internals --------------------------------------------------------------------------
    def _check_running_locked(self) -> None:
        if self._state != "running":
            raise status.Unavailable(f"The batch scheduler is not running ({self._state})")

    def _close_queue(self, queue: BatchQueue) -> None:
        with self._cond:
            queue._closed = True
            self._cond.notify_all()
            if self._state == "running":
                while not queue._empty_locked():
                    self._cond.wait(0.1)
            if queue in self._queues:
                self._queues.remove(queue)
                self._next = 0

    def _pick_locked(self, now: float) -> Optional[Tuple[BatchQueue, _Batch]]:
        count = len(self._queues)
        for offset in range(count):
            index = (self._next + offset) % count
            queue = self._queues[index]
            batch = queue._take_batch_locked(now)
            if batch is not None:
                self._next = (index + 1) % count
                return queue, batch
        return None

    def _wait_seconds_locked(self, now: float) -> Optional[float]:
        deadlines = [d for d in (q._deadline_locked() for q in self._queues) if d is not None]
        return max(0.0, min(deadlines) - now) if deadlines else None

    def _thread_logic(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    picked = self._pick_locked(now)
                    if picked is not None:
                        break
                    if self._state == "stopped":
                        return
                    self._cond.wait(self._wait_seconds_locked(now))
                if any(len(q._batches) > 1 or q._open_schedulable_locked(now) for q in self._queues):
                    self._cond.notify()
            queue, batch = picked
            try:
                queue._process(batch)
            except Exception:  # _process hands errors to futures; this is a bug guard
                logger.exception("batch processing failed in queue %s", queue.name)
            finally:
                with self._cond:
                    queue._in_flight -= 1
                    if queue._closed and queue._empty_locked():
                        self._cond.notify_all()
