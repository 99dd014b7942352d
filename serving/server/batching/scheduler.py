"""``BatchScheduler``: TF's ``SharedBatchScheduler``, one thread pool shared by many batch queues.

``num_batch_threads`` threads (named ``<thread_pool_name>_<i>``) take ready
batches from the queues round-robin, so a busy queue cannot starve the
others. A queue may also run a ready batch on the thread of a caller waiting
for it (``run_here``); batches run anywhere share ``num_batch_threads`` slots,
so at most that many run at once, as in TF Serving. The server makes one queue per model version and signature
(``BatchingRunWrapper``); each queue is TF Serving's ``BatchingSession`` for
one signature (``queue.BatchQueue``; batch formation in ``batch.Batch``).

The scheduler implements ``queue.QueueScheduler``, the interface its queues
call, and uses only the queues' scheduler-side methods (``next_ready_time``,
``take_batch``, ``run_batch``, ``stop_accepting``, ``wait_until_drained``).

Lifecycle: ``start()`` launches the threads; ``stop()`` closes every queue,
runs every task already accepted (each future gets a result or an exception)
and joins the threads. ``submit`` on a queue whose scheduler is not running
raises ``Unavailable``.

Thread-safety: every public method may be called from any thread. The
scheduler's lock guards its list of queues and its state; it is taken before a
queue's lock, never after.

Differences from TF Serving, on purpose: outputs without one row per padded
input row fail the batch with ``Internal`` (TF: ``FailedPrecondition``, same
wording); tasks of different shapes get separate batches (TF merges them and
fails the whole batch); a cancelled future leaves its batch (TF has per-task
deadlines instead).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import List, Optional, Tuple

from serving import status
from serving.server.batching.batch import Batch, BatchFn, BatchingMetrics
from serving.server.batching.options import BatchingOptions
from serving.server.batching.queue import BatchQueue

__all__ = ["BatchScheduler"]

logger = logging.getLogger(__name__)


class BatchScheduler:
    """TF's ``SharedBatchScheduler``: ``num_batch_threads`` threads shared by all queues.

    ``metrics`` (e.g. a ``ServerMetrics``) receives TF Serving's
    ``batching_session`` metrics, labelled as the real server labels them
    (``queuing_latency{thread_pool_name=""}``). Lifecycle: ``start()`` once,
    ``stop()`` (idempotent; drains every queue first), or use it as a context
    manager. Thread-safe.
    """

    def __init__(self, options: Optional[BatchingOptions] = None,
                 metrics: Optional[BatchingMetrics] = None) -> None:
        self.options = options if options is not None else BatchingOptions()
        self.metrics = metrics
        self._lock = threading.Lock()  # plain (not reentrant): cheaper to take than the condition
        self._cond = threading.Condition(self._lock)
        self._queues: List[BatchQueue] = []
        self._next = 0
        self._threads: List[threading.Thread] = []
        self._busy = 0  # batches running, on batch threads or callers' threads (run_here)
        self._state = "new"  # new -> running -> stopping -> stopped

    def queue(self, run: BatchFn, name: str) -> BatchQueue:
        """A new queue whose batches go to ``run`` (called on a batch thread, one batch at a time
        per thread; it must be thread-safe if ``num_batch_threads`` > 1)."""
        with self._lock:
            if self._state in ("stopping", "stopped"):
                raise status.Unavailable("The batch scheduler has been stopped")
            queue = BatchQueue(run, name, self.options, self, self.metrics)
            self._queues.append(queue)
        return queue

    def start(self) -> "BatchScheduler":
        """Launch the batch threads (named ``<thread_pool_name>_<i>``)."""
        with self._lock:
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
        with self._lock:
            if self._state in ("stopping", "stopped"):
                return
            if self._state == "new":  # nothing can have been accepted
                self._state = "stopped"
                return
            self._state = "stopping"
            queues = list(self._queues)
        for queue in queues:
            queue.stop_accepting()
        with self._lock:
            self._cond.notify_all()
        for queue in queues:
            queue.wait_until_drained()
        with self._lock:
            self._queues.clear()
            self._state = "stopped"
            self._cond.notify_all()
        for thread in self._threads:
            thread.join()
        self._threads.clear()

    def __enter__(self) -> "BatchScheduler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- queue.QueueScheduler ---------------------------------------------------------------
    def check_running(self) -> None:
        """Raise ``Unavailable`` unless running. Reads one attribute, takes no lock."""
        state = self._state
        if state != "running":
            raise status.Unavailable(f"The batch scheduler is not running ({state})")

    def batch_ready(self) -> None:
        """Wake one batch thread to look for a ready batch (or a new timeout)."""
        with self._lock:
            self._cond.notify()

    def run_here(self, queue: BatchQueue) -> bool:
        """Run ``queue``'s ready batch on this thread if fewer than ``num_batch_threads`` batches run.

        Otherwise (False) nothing happens: a batch thread, woken by whoever frees a slot, takes it.
        """
        with self._lock:
            if self._busy >= self.options.num_batch_threads:
                return False
            batch = queue.take_batch(time.monotonic())
            if batch is None:  # not ready, or a batch thread took it first
                return True
            self._busy += 1
        self._run_in_slot(queue, batch, wake_a_thread=True)
        return True

    def queue_closed(self, queue: BatchQueue) -> None:
        """Forget a closed, drained queue."""
        with self._lock:
            if queue in self._queues:
                self._queues.remove(queue)
                self._next = 0

    # -- batch threads ----------------------------------------------------------------------
    def _pick_locked(self, now: float) -> Optional[Tuple[BatchQueue, Batch]]:
        """The next ready batch, round-robin over the queues."""
        count = len(self._queues)
        for offset in range(count):
            index = (self._next + offset) % count
            queue = self._queues[index]
            batch = queue.take_batch(now)
            if batch is not None:
                self._next = (index + 1) % count
                return queue, batch
        return None

    def _ready_times_locked(self) -> List[float]:
        return [t for t in (q.next_ready_time() for q in self._queues) if t is not None]

    def _thread_logic(self) -> None:
        slots = self.options.num_batch_threads
        while True:
            with self._lock:
                while True:
                    now = time.monotonic()
                    picked = self._pick_locked(now) if self._busy < slots else None
                    if picked is not None:
                        self._busy += 1
                        break
                    if self._state == "stopped":
                        return
                    times = self._ready_times_locked()
                    # Every slot taken: whoever frees one notifies, so wait without a timeout.
                    self._cond.wait(max(0.0, min(times) - now) if times and self._busy < slots else None)
                if self._busy < slots and any(t <= now for t in self._ready_times_locked()):
                    self._cond.notify()  # more work: hand it to another thread
            self._run_in_slot(*picked, wake_a_thread=False)  # this thread looks for more work itself

    def _run_in_slot(self, queue: BatchQueue, batch: Batch, wake_a_thread: bool) -> None:
        """Run a batch that holds a slot, then free the slot (waking a batch thread if asked and a
        queue holds tasks: it may have waited for the slot)."""
        try:
            queue.run_batch(batch)
        except Exception:  # run_batch hands errors to futures; this is a bug guard
            logger.exception("batch processing failed in queue %s", queue.name)
        finally:
            with self._lock:
                self._busy -= 1
                if wake_a_thread and any(q.holds_tasks() for q in self._queues):
                    self._cond.notify()
