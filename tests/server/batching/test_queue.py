"""BatchQueue against its small scheduler interface (``QueueScheduler``), with no threads at all.

``ManualScheduler`` implements the three calls a queue makes of its scheduler;
the test itself plays the batch thread (``take_batch`` / ``run_batch``), so
every step is deterministic.
"""
from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from serving import status
from serving.server.batching import BatchingOptions, BatchQueue
from serving.server.batching.queue import QueueScheduler
from serving.server.metrics import ServerMetrics

TIMEOUT_MICROS = 3_600_000_000


class ManualScheduler:
    """A ``QueueScheduler`` whose batch thread is the test."""

    def __init__(self) -> None:
        self.running = True
        self.wakeups = 0
        self.closed: list[BatchQueue] = []

    def check_running(self) -> None:
        if not self.running:
            raise status.Unavailable("The batch scheduler is not running (stopped)")

    def batch_ready(self) -> None:
        self.wakeups += 1

    def queue_closed(self, queue: BatchQueue) -> None:
        self.closed.append(queue)


def double(inputs):
    return {"y": inputs["x"] * 2}


def rows(*values: float) -> dict[str, np.ndarray]:
    return {"x": np.array([[v] for v in values], dtype=np.float32)}


def make_queue(scheduler: QueueScheduler, **kwargs) -> BatchQueue:
    options = BatchingOptions(**{"num_batch_threads": 1, "batch_timeout_micros": TIMEOUT_MICROS, **kwargs})
    return BatchQueue(double, "m", options, scheduler)


def test_the_queue_wakes_its_scheduler_only_for_a_ready_batch_or_a_new_timeout():
    scheduler = ManualScheduler()
    queue = make_queue(scheduler, max_batch_size=2)
    assert queue.next_ready_time() is None
    first = queue.submit(rows(1))
    assert scheduler.wakeups == 1  # a timeout started
    started = queue.next_ready_time() - TIMEOUT_MICROS / 1e6
    queue.submit(rows(2))
    assert scheduler.wakeups == 2 and queue.next_ready_time() == float("-inf")  # full: ready now
    queue.submit(rows(3))
    assert scheduler.wakeups == 3
    full = queue.take_batch(started)
    assert [len(t.inputs["x"]) for t in full.tasks] == [1, 1]
    assert queue.take_batch(started) is None  # the open batch waits for its timeout
    partial = queue.take_batch(queue.next_ready_time())
    assert len(partial.tasks) == 1
    queue.run_batch(full)
    queue.run_batch(partial)
    assert first.result(0)["y"][0, 0] == 2 and partial.tasks[0].future.result(0)["y"][0, 0] == 6
    assert queue.next_ready_time() is None


def test_close_makes_the_open_batch_ready_and_leaves_the_scheduler_once_drained():
    scheduler = ManualScheduler()
    queue = make_queue(scheduler, max_batch_size=4)
    future = queue.submit(rows(5))
    queue.stop_accepting()
    assert queue.next_ready_time() == float("-inf")
    with pytest.raises(status.Unavailable, match="Batch scheduling queue m is closed"):
        queue.submit(rows(6))
    queue.run_batch(queue.take_batch(0.0))
    queue.close()  # already drained: returns at once
    assert future.result(0)["y"][0, 0] == 10
    assert scheduler.closed == [queue]


def test_a_queue_whose_scheduler_is_not_running_refuses_tasks():
    scheduler = ManualScheduler()
    scheduler.running = False
    with pytest.raises(status.Unavailable, match="not running"):
        make_queue(scheduler).submit(rows(1))
    assert scheduler.wakeups == 0


def test_a_caller_whose_wait_times_out_has_its_task_cancelled_and_left_out_of_the_batch():
    scheduler = ManualScheduler()
    queue = make_queue(scheduler, max_batch_size=4)
    queued = queue.submit(rows(1))  # no caller waits on it, so the next task's batch cannot close early
    late = queue.submit(rows(2), caller_waits=True)
    with pytest.raises(TimeoutError):
        queue.result(late, 0.0)  # its deadline has passed
    assert late.cancelled()  # by the queue: the caller need not cancel it
    batch = queue.take_batch(queue.next_ready_time())
    queue.run_batch(batch)
    assert queued.result(0)["y"].tolist() == [[2.0]]  # the batch ran without the cancelled task's row


def test_input_batch_sizes_are_recorded_once_per_task_at_submit_and_latencies_once_per_piece():
    metrics = ServerMetrics(CollectorRegistry())
    scheduler = ManualScheduler()
    options = BatchingOptions(num_batch_threads=1, batch_timeout_micros=TIMEOUT_MICROS, max_batch_size=4,
                              enable_large_batch_splitting=True, max_execution_batch_size=2)
    queue = BatchQueue(double, "m", options, scheduler, metrics)
    with pytest.raises(status.InvalidArgument, match="Task size 5 is larger"):
        queue.submit(rows(*range(5)))
    split = queue.submit(rows(1, 2, 3))  # pieces of 2 and 1 rows in two batches
    while queue.next_ready_time() is not None:
        queue.run_batch(queue.take_batch(queue.next_ready_time()))
    assert split.result(0)["y"].tolist() == [[2.0], [4.0], [6.0]]
    page = metrics.render().decode()
    assert ":tensorflow:serving:batching_session:input_batch_size_count{} 2\n" in page
    assert ":tensorflow:serving:batching_session:input_batch_size_sum{} 8\n" in page  # 5, then 3 once
    assert ':tensorflow:serving:batching_session:queuing_latency_count{thread_pool_name=""} 2\n' in page
