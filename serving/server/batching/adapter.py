"""Server-side batching as the manager's ``run_wrapper`` (TF Serving's batching session).

TF Serving wraps each loaded session with a batching session: one queue per
(model version, signature, input and output tensor set) on one shared
``SharedBatchScheduler`` pool (``batching/batching_session.cc``). Here
``BatchingRunWrapper(scheduler)`` is given to the manager's ``LoaderOptions``;
the loader calls it right after a version loads, before warmup. Queues are
created on first use and closed when the servable closes.

Every caller blocks on its task's future, and says so (``submit(...,
caller_waits=True)``): when a caller is alone in flight its batch runs at once,
on its own thread if a batch slot is free, so batching costs nothing when
there is nothing to batch. A full queue raises ``UNAVAILABLE`` at once; a request larger than the
largest batch is refused with ``INVALID_ARGUMENT`` unless the parameters
enable large-batch splitting (both done by the queue). While a request
waits in a queue its deadline (``serving.server.deadline.remaining_seconds``) is honoured.

The adapter needs only ``QueueFactory`` of the scheduler and ``TaskQueue`` of
its queues (``BatchScheduler`` and ``BatchQueue`` implement them).
"""
from __future__ import annotations

import threading
from typing import Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

import numpy as np

from serving import status
from serving.server.batching.batch import BatchFn, TaskFuture, Tensors
from serving.server.deadline import remaining_seconds
from serving.server.tensorflow.servable import RunFn, Servable

__all__ = ["BatchingRunWrapper", "QueueFactory", "TaskQueue"]

_QueueKey = Tuple[str, Tuple[str, ...], Tuple[str, ...]]  # signature, input aliases, output aliases


class TaskQueue(Protocol):
    """A batching queue as the adapter uses it."""

    def submit(self, inputs: Mapping[str, np.ndarray], *, caller_waits: bool = False) -> TaskFuture:
        """Queue one task; the future gets the task's rows of every output. With ``caller_waits``
        the caller waits on the future next, so the queue may run the task's batch on this thread
        (and counts the caller in flight until the future is done)."""

    def result(self, future: TaskFuture, timeout: Optional[float] = None) -> Tensors:
        """Wait for a ``caller_waits`` task's rows (``TimeoutError`` after ``timeout``, the task
        cancelled unless its batch has started); the queue may run the task's batch on this thread
        meanwhile."""

    def close(self) -> None:
        """Refuse new tasks and return once every accepted one has been processed."""


class QueueFactory(Protocol):
    """What the adapter needs of a batch scheduler: a new queue per servable signature."""

    def queue(self, run: BatchFn, name: str) -> TaskQueue:
        """A queue whose merged batches go to ``run``."""


class BatchingRunWrapper:
    """``run_wrapper(servable, run) -> run`` that sends every run through a batch queue.

    Thread-safe: queues are created under a lock; ``TaskQueue.submit`` is
    thread-safe by contract. The returned run blocks its caller until the
    batch has run or the request's deadline has passed.
    """

    def __init__(self, scheduler: QueueFactory) -> None:
        self._scheduler = scheduler

    def __call__(self, servable: Servable, run: RunFn) -> RunFn:
        queues: Dict[_QueueKey, TaskQueue] = {}
        lock = threading.Lock()
        closed = False

        def queue_for(signature_name: str, input_keys: Tuple[str, ...],
                      output_keys: Tuple[str, ...]) -> TaskQueue:
            key = (signature_name, input_keys, output_keys)
            queue = queues.get(key)  # the common case, without the lock (a dict read is atomic)
            if queue is not None and not closed:
                return queue
            with lock:
                if closed:
                    raise status.Unavailable(
                        f"Servable {servable.name} version {servable.version} has been unloaded")
                if key not in queues:
                    queues[key] = self._scheduler.queue(
                        _batch_fn(run, signature_name, output_keys),
                        f"{servable.name}/{servable.version}/{signature_name}")
                return queues[key]

        def close_queues() -> None:
            nonlocal closed
            with lock:
                closed = True
                pending: List[TaskQueue] = list(queues.values())
                queues.clear()
            for queue in pending:
                queue.close()

        def batched_run(signature_name: str, inputs: Mapping[str, np.ndarray],
                        output_keys: Sequence[str]) -> Tensors:
            queue = queue_for(signature_name, tuple(sorted(inputs)), tuple(output_keys))
            future = queue.submit(inputs, caller_waits=True)
            return _result(queue, future)

        servable.add_close_callback(close_queues)
        return batched_run


def _batch_fn(run: RunFn, signature_name: str, output_keys: Tuple[str, ...]) -> BatchFn:
    """One queue's batch function: the servable's run of ``signature_name`` on a merged batch."""
    def run_batch(inputs: Tensors) -> Tensors:
        return run(signature_name, inputs, list(output_keys))
    return run_batch


def _result(queue: TaskQueue, future: TaskFuture) -> Tensors:
    """The batch's answer for this task, within the request's deadline."""
    try:
        return queue.result(future, remaining_seconds())  # a deadline already passed: TimeoutError at once
    except TimeoutError:  # the queue has cancelled the task unless its batch had started
        raise status.DeadlineExceeded("Deadline Exceeded") from None
