"""``BatchQueue``: one batching queue (one model version and signature) with TF's queue rules.

Rules (``shared_batch_scheduler.h``):

- the open (newest) batch takes tasks until one does not fit in
  ``max_batch_size`` (``max_execution_batch_size`` when splitting); then it is
  closed and a new one opened — unless the queue already holds
  ``max_enqueued_batches`` batches, in which case ``submit`` raises
  ``Unavailable("The batch scheduling queue to which this task was submitted is full")``
  at once;
- a batch is ready to run when it is closed, or when the open batch is full,
  its first task has waited ``batch_timeout_micros`` (0: at once), or the
  queue is closed;
- a task with more rows than ``max_batch_size`` is rejected with
  ``InvalidArgument("Task size N is larger than maximum input batch size M")``;
  with ``enable_large_batch_splitting`` a task that does not fit the open batch
  is split into pieces of at most ``max_execution_batch_size`` rows, which
  fill the open batch and the next ones (``batch.split_task``);
- tasks whose inputs differ in names, dtypes or non-batch dimensions never
  share a batch: the open batch is closed and the task starts a new one. With
  ``pad_variable_length_inputs`` tasks only need equal names, dtypes and ranks.

Two rules for callers that block on their future anyway (``submit(...,
caller_waits=True)``, what ``BatchingRunWrapper`` does), so that batching never
costs when nothing can be batched (TF Serving's ``batch_timeout_micros`` is a
maximum wait, and these only shorten it):

- the open batch is also ready at once when it holds every waiting caller of
  the queue and the queue is otherwise idle (no other batch queued or running):
  no task the queue knows of can join it, so waiting the timeout would only add
  latency (with one request in flight, a batch of one runs at once);
- when the caller's own task is in the only batch and that batch is ready, the
  batch runs on the caller's thread if the scheduler has a free batch slot
  (``QueueScheduler.run_here``): no hand-off to a batch thread and back. Batches
  run on callers' threads count against ``num_batch_threads`` like any other.

The queue and its scheduler meet through a small interface, and neither
touches the other's state:

- the queue calls its ``QueueScheduler`` (``BatchScheduler`` implements it):
  ``check_running()`` before accepting a task, ``batch_ready()`` when it has a
  batch to run or a new timeout to wait for, ``queue_closed(queue)`` once it
  is closed and drained;
- the scheduler calls the queue's scheduler-side methods: ``next_ready_time``,
  ``take_batch``, ``run_batch``, ``stop_accepting`` and ``wait_until_drained``.

Thread-safety: every method may be called from any thread. The queue guards
its state with its own lock. Lock order is scheduler → queue: the scheduler
may call ``next_ready_time``/``take_batch`` while holding its lock, and the
queue never calls the scheduler while holding its own, except
``check_running``, which must take no lock.
"""
from __future__ import annotations

import collections
import math
import threading
import time
from typing import Deque, Mapping, Optional, Protocol

import numpy as np

from serving import status
from serving.server.batching.batch import (
    Batch,
    BatchFn,
    BatchingMetrics,
    Task,
    TaskFuture,
    Tensors,
    batch_key,
    split_task,
    task_size,
)
from serving.server.batching.options import BatchingOptions

__all__ = ["QUEUE_FULL_MESSAGE", "QueueScheduler", "BatchQueue"]

QUEUE_FULL_MESSAGE = "The batch scheduling queue to which this task was submitted is full"


class QueueScheduler(Protocol):
    """What a ``BatchQueue`` needs of the scheduler that runs its batches."""

    def check_running(self) -> None:
        """Raise ``Unavailable`` unless the scheduler is running. Takes no lock: the queue calls it
        under its own lock, so that a ``stop()`` either sees the task or refuses it."""

    def batch_ready(self) -> None:
        """Wake a batch thread: the queue has a batch to run, or a new timeout to wait for."""

    def queue_closed(self, queue: "BatchQueue") -> None:
        """Forget ``queue``: it is closed and every task it accepted has been processed."""

    def run_here(self, queue: "BatchQueue") -> bool:
        """Run ``queue``'s ready batch on the calling thread if a batch slot is free; otherwise leave
        it to the batch threads (whoever frees a slot looks for ready batches). False when no slot was
        free. Called without locks."""


class BatchQueue:
    """One batching queue; made by ``BatchScheduler.queue``. See the module docstring for the rules.

    Client side: ``submit`` (any number of threads) and ``close`` (idempotent:
    stops accepting tasks, waits until every accepted task has been processed,
    then leaves its scheduler).
    """

    def __init__(self, run: BatchFn, name: str, options: BatchingOptions, scheduler: QueueScheduler,
                 metrics: Optional[BatchingMetrics] = None) -> None:
        self.name = name
        self._run = run
        self._options = options
        self._limit = options.execution_batch_size
        self._timeout = options.batch_timeout_seconds
        self._splitting = options.enable_large_batch_splitting
        self._scheduler = scheduler
        self._metrics = metrics
        self._lock = threading.Lock()  # plain (not reentrant): cheaper to take than the condition
        self._cond = threading.Condition(self._lock)
        self._batches: Deque[Batch] = collections.deque([Batch()])
        self._in_flight = 0
        self._waiting_callers = 0  # submit(caller_waits=True) tasks neither processed nor cancelled
        self._closed = False

    def __repr__(self) -> str:
        return f"BatchQueue({self.name!r})"

    # -- client side ------------------------------------------------------------------------
    def submit(self, inputs: Mapping[str, np.ndarray], *, caller_waits: bool = False) -> TaskFuture:
        """Queue one task; its future gets this task's rows of every output.

        Raises at once (never blocks): ``InvalidArgument`` for malformed or
        too-large tasks, ``Unavailable`` when the queue is full, closed, or its
        scheduler is not running. A future cancelled before its batch starts
        is left out of the batch.

        ``caller_waits=True`` promises that the calling thread waits for the
        future next, with ``result(future, timeout)``: the caller counts as in
        flight until its task has been processed or cancelled, a ready batch holding its task may run
        on this thread before ``submit`` returns, and a batch it opens keeps its
        timeout on this thread (see the module docstring).
        """
        options = self._options
        arrays = {name: value if isinstance(value, np.ndarray) else np.asarray(value)
                  for name, value in inputs.items()}
        size = task_size(arrays)
        if self._metrics is not None:
            for _ in arrays:  # TF records one sample per input tensor, before any check
                self._metrics.record_input_batch_size(size)
        if size > options.max_batch_size:
            raise status.InvalidArgument(
                f"Task size {size} is larger than maximum input batch size {options.max_batch_size}")
        key = batch_key(arrays, options.pad_variable_length_inputs)
        future = TaskFuture()
        with self._lock:
            self._scheduler.check_running()
            if self._closed:
                raise status.Unavailable(f"Batch scheduling queue {self.name} is closed")
            now = time.monotonic()
            task = Task(arrays, size, key, now, future, waits=caller_waits)
            if self._splitting:
                self._enqueue_split_locked(task)
            else:
                self._enqueue_locked(task)
            if caller_waits:
                self._waiting_callers += 1
            open_batch = self._batches[-1]
            ready = self._next_ready_time_locked() <= now
            run_here = caller_waits and ready and len(self._batches) == 1 and open_batch.tasks[-1] is task
            # A waiting caller that opens a batch keeps its timeout itself (``result``); otherwise a
            # batch thread must learn of the new timeout.
            opened = len(open_batch.tasks) == 1 and open_batch.tasks[0].future is future
            future.opened_batch = opened
            wake = ready or (self._timeout > 0 and len(open_batch.tasks) == 1 and not (caller_waits and opened))
        if run_here:
            self._scheduler.run_here(self)
        elif wake:
            self._scheduler.batch_ready()
        return future

    def result(self, future: TaskFuture, timeout: Optional[float] = None) -> Tensors:
        """Wait up to ``timeout`` seconds (None: no limit) for the rows of a ``caller_waits`` task.

        While its task is the first of the open batch, the caller keeps that batch's timeout
        itself: when it expires the batch runs on this thread if a batch slot is free, so no
        batch thread is woken for it. Raises ``TimeoutError`` when ``timeout`` passes first (at
        once if it is <= 0, running nothing), having cancelled the task unless its batch has
        started; the batch threads then take over the batch's timeout.
        """
        if future.done():  # the batch ran inside submit
            return future.result()
        end = None if timeout is None else time.monotonic() + timeout
        leading = future.opened_batch  # only the task that opened a batch may lead it
        while True:
            ready_at = self._lead_ready_time(future) if leading else None
            now = time.monotonic()
            if end is not None and now >= end and not future.done():
                if future.cancel():
                    with self._lock:
                        self._waiting_callers -= 1
                if ready_at is not None:
                    self._scheduler.batch_ready()  # hand the batch's timeout to a batch thread
                raise TimeoutError()
            if ready_at is not None and ready_at <= now:
                leading = self._scheduler.run_here(self)  # no free slot: a batch thread will run it
                continue
            wait = None if end is None else end - now
            if ready_at is not None:
                wait = ready_at - now if wait is None else min(wait, ready_at - now)
            if future.wait(wait):
                return future.result()

    def close(self) -> None:
        """Stop accepting tasks, wait until every accepted one has been processed, leave the scheduler."""
        self.stop_accepting()
        self._scheduler.batch_ready()  # a closed queue's open batch is ready at once
        self.wait_until_drained()
        self._scheduler.queue_closed(self)

    # -- scheduler side ---------------------------------------------------------------------
    def next_ready_time(self) -> Optional[float]:
        """When ``take_batch`` will return a batch (``time.monotonic()`` seconds; ``-inf``: now),
        or None while the queue holds no task."""
        with self._lock:
            if len(self._batches) == 1 and not self._batches[0].tasks:
                return None
            return self._next_ready_time_locked()

    def holds_tasks(self) -> bool:
        """Whether a task is queued (not yet taken). Takes no lock: a hint for waking batch threads,
        exact for tasks queued before the caller took its own lock."""
        return len(self._batches) > 1 or bool(self._batches[0].tasks)

    def take_batch(self, now: float) -> Optional[Batch]:
        """The oldest batch if it is ready at ``now``, counted in flight until ``run_batch`` ends."""
        with self._lock:
            open_batch = self._batches[-1]
            if len(self._batches) == 1:
                if not open_batch.tasks or self._next_ready_time_locked() > now:
                    return None
                self._batches.append(Batch())
            self._in_flight += 1
            return self._batches.popleft()

    def run_batch(self, batch: Batch) -> None:
        """Process a batch from ``take_batch`` (on a batch thread): every task gets its rows or the error."""
        try:
            batch.process(self._run, self._options, self._metrics)
        finally:
            waited = sum(1 for task in batch.tasks if task.waits and not task.future.cancelled())
            with self._lock:
                self._in_flight -= 1
                self._waiting_callers -= waited
                if self._drained_locked():
                    self._cond.notify_all()

    def stop_accepting(self) -> None:
        """Refuse new tasks; the open batch is ready at once. The caller wakes the batch threads."""
        with self._lock:
            self._closed = True

    def wait_until_drained(self) -> None:
        """Block until no task is queued or running. Never call it holding the scheduler's lock."""
        with self._lock:
            self._cond.wait_for(self._drained_locked)

    # -- under self._lock -------------------------------------------------------------------
    def _next_ready_time_locked(self) -> float:
        open_batch = self._batches[-1]
        if len(self._batches) > 1 or self._closed or open_batch.size >= self._limit:
            return -math.inf
        if self._in_flight == 0 and 0 < self._waiting_callers == len(open_batch.tasks):
            return -math.inf  # it holds every waiting caller and nothing else runs: nothing can join it
        return open_batch.started + self._timeout

    def _lead_ready_time(self, future: TaskFuture) -> Optional[float]:
        """The open batch's ready time if ``future``'s task opened it and it is still queued."""
        with self._lock:
            open_batch = self._batches[-1]
            if len(self._batches) == 1 and open_batch.tasks and open_batch.tasks[0].future is future:
                return self._next_ready_time_locked()
            return None

    def _drained_locked(self) -> bool:
        return self._in_flight == 0 and len(self._batches) == 1 and not self._batches[0].tasks

    def _enqueue_locked(self, task: Task) -> None:
        if not self._batches[-1].fits(task.key, task.size, self._limit):
            if len(self._batches) >= self._options.max_enqueued_batches:
                raise status.Unavailable(QUEUE_FULL_MESSAGE)
            self._batches.append(Batch())
        self._batches[-1].add(task)

    def _enqueue_split_locked(self, task: Task) -> None:
        limit = self._limit
        open_batch = self._batches[-1]
        room = limit - open_batch.size if (not open_batch.tasks or open_batch.key == task.key) else 0
        if task.size <= room and open_batch.fits(task.key, task.size, limit):
            open_batch.add(task)
            return
        capacity = (self._options.max_enqueued_batches - len(self._batches)) * limit + room
        if task.size > capacity:
            raise status.Unavailable(QUEUE_FULL_MESSAGE)
        for piece in split_task(task, room, limit):
            if not self._batches[-1].fits(piece.key, piece.size, limit):
                self._batches.append(Batch())
            self._batches[-1].add(piece)
