"""BatchScheduler/BatchQueue: batch formation, padding, limits, errors, draining, metrics.

The batch function is a real numpy computation that records what it saw. A
"gate" holds the only batch thread inside a first batch, so the tests decide
exactly which tasks are queued together — no sleeps, no timing races.
"""
from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from serving import status
from serving.server.batching import QUEUE_FULL_MESSAGE, BatchingOptions, BatchScheduler
from serving.server.metrics import ServerMetrics

WAIT = 60.0  # generous: the machine is shared


class Model:
    """y = 10 * x + 1 row by row, plus the row sum; records every batch it ran."""

    def __init__(self, gated: bool = False) -> None:
        self.batches: list[dict[str, np.ndarray]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        if not gated:
            self.release.set()
        self.lock = threading.Lock()

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self.lock:
            self.batches.append({k: v.copy() for k, v in inputs.items()})
        self.entered.set()
        assert self.release.wait(WAIT)
        x = inputs["x"]
        return {"y": 10 * x + 1, "total": x.reshape(len(x), -1).sum(axis=1)}

    @property
    def sizes(self) -> list[int]:
        return [len(b["x"]) for b in self.batches]


def rows(*values: float, width: int = 2) -> dict[str, np.ndarray]:
    return {"x": np.array([[v] * width for v in values], dtype=np.float32)}


def options(**kwargs) -> BatchingOptions:
    return BatchingOptions(**{"num_batch_threads": 1, **kwargs})


@pytest.fixture
def metrics() -> ServerMetrics:
    return ServerMetrics(CollectorRegistry())


def hold_the_thread(queue, model: Model) -> Future:
    """Submit one task and wait until the only batch thread is stuck inside it."""
    future = queue.submit(rows(-1.0))
    assert model.entered.wait(WAIT)
    return future


def results(futures):
    return [f.result(WAIT) for f in futures]


def test_tasks_waiting_for_a_busy_thread_form_batches_up_to_max_batch_size():
    model = Model(gated=True)
    with BatchScheduler(options(max_batch_size=4)) as scheduler:
        queue = scheduler.queue(model, "m")
        first = hold_the_thread(queue, model)
        futures = [queue.submit(rows(i)) for i in range(10)]
        model.release.set()
        outputs = results([first, *futures])
    assert model.sizes == [1, 4, 4, 2]
    for i, out in enumerate(outputs[1:]):
        np.testing.assert_array_equal(out["y"], [[10 * i + 1] * 2])
        np.testing.assert_array_equal(out["total"], [2 * i])


def test_multi_row_tasks_get_back_exactly_their_rows():
    model = Model(gated=True)
    with BatchScheduler(options(max_batch_size=8)) as scheduler:
        queue = scheduler.queue(model, "m")
        first = hold_the_thread(queue, model)
        a, b, c = queue.submit(rows(1, 2, 3)), queue.submit(rows(4)), queue.submit(rows(5, 6))
        model.release.set()
        results([first, a, b, c])
        assert model.sizes[1:] == [6]
        np.testing.assert_array_equal(a.result(WAIT)["total"], [2, 4, 6])
        np.testing.assert_array_equal(b.result(WAIT)["total"], [8])
        np.testing.assert_array_equal(c.result(WAIT)["y"][:, 0], [51, 61])


def test_batch_timeout_flushes_a_partial_batch_only_after_the_timeout():
    model = Model()
    timeout_s = 0.3
    with BatchScheduler(options(max_batch_size=100, batch_timeout_micros=int(timeout_s * 1e6))) as scheduler:
        queue = scheduler.queue(model, "m")
        started = time.monotonic()
        futures = [queue.submit(rows(i)) for i in range(3)]
        results(futures)
        waited = time.monotonic() - started
    assert model.sizes == [3]
    assert waited >= timeout_s  # a lower bound: cannot be flaky on a slow machine


def test_a_full_batch_runs_without_waiting_for_the_timeout():
    model = Model()
    with BatchScheduler(options(max_batch_size=2, batch_timeout_micros=3_600_000_000)) as scheduler:
        queue = scheduler.queue(model, "m")
        outputs = results([queue.submit(rows(1)), queue.submit(rows(2))])
    assert model.sizes == [2] and outputs[1]["total"][0] == 4


def test_batches_are_padded_to_allowed_sizes_with_the_last_tasks_first_row_and_unpadded(metrics):
    model = Model(gated=True)
    with BatchScheduler(options(max_batch_size=8, allowed_batch_sizes=(2, 4, 8)), metrics) as scheduler:
        queue = scheduler.queue(model, "m")
        first = hold_the_thread(queue, model)
        a, b = queue.submit(rows(1)), queue.submit(rows(2, 3))
        model.release.set()
        outputs = results([first, a, b])
    assert model.sizes == [2, 4]  # 1 → 2 and 3 → 4
    np.testing.assert_array_equal(model.batches[0]["x"][:, 0], [-1, -1])
    np.testing.assert_array_equal(model.batches[1]["x"][:, 0], [1, 2, 3, 2])  # pad = first row of last task
    assert len(outputs[0]["y"]) == 1
    np.testing.assert_array_equal(outputs[1]["total"], [2])
    np.testing.assert_array_equal(outputs[2]["total"], [4, 6])
    page = metrics.render().decode()
    assert ':tensorflow:serving:batching_session:padding_size_sum{execution_batch_size="2"} 1\n' in page
    assert ':tensorflow:serving:batching_session:padding_size_sum{execution_batch_size="4"} 1\n' in page


def test_full_queue_rejects_at_once_with_unavailable_and_keeps_accepted_tasks():
    model = Model(gated=True)
    with BatchScheduler(options(max_batch_size=2, max_enqueued_batches=2)) as scheduler:
        queue = scheduler.queue(model, "m")
        first = hold_the_thread(queue, model)
        accepted = [queue.submit(rows(i)) for i in range(4)]  # two full batches
        with pytest.raises(status.Unavailable) as raised:
            queue.submit(rows(9))
        assert raised.value.code == status.Code.UNAVAILABLE
        assert raised.value.details == QUEUE_FULL_MESSAGE
        model.release.set()
        outputs = results([first, *accepted])
    assert [o["total"][0] for o in outputs[1:]] == [0, 2, 4, 6]


def test_task_larger_than_max_batch_size_is_invalid_argument():
    with BatchScheduler(options(max_batch_size=4)) as scheduler:
        queue = scheduler.queue(Model(), "m")
        with pytest.raises(status.InvalidArgument) as raised:
            queue.submit(rows(*range(5)))
        assert raised.value.details == "Task size 5 is larger than maximum input batch size 4"


def test_large_batch_splitting_splits_across_batches_and_reassembles_in_order():
    model = Model(gated=True)
    opts = options(max_batch_size=16, enable_large_batch_splitting=True, max_execution_batch_size=3)
    with BatchScheduler(opts) as scheduler:
        queue = scheduler.queue(model, "m")
        first = hold_the_thread(queue, model)
        small = queue.submit(rows(100))
        big = queue.submit(rows(*range(8)))
        model.release.set()
        outputs = results([first, small, big])
    assert model.sizes == [1, 3, 3, 3]  # 1 + 2 pieces of big fill batch 1, then 3 and 3
    np.testing.assert_array_equal(outputs[2]["total"], [2 * i for i in range(8)])
    np.testing.assert_array_equal(outputs[2]["y"][:, 1], [10 * i + 1 for i in range(8)])
    np.testing.assert_array_equal(outputs[1]["total"], [200])


def test_splitting_still_rejects_tasks_above_max_batch_size():
    opts = options(max_batch_size=4, enable_large_batch_splitting=True, max_execution_batch_size=2)
    with BatchScheduler(opts) as scheduler:
        with pytest.raises(status.InvalidArgument, match="Task size 5 is larger"):
            scheduler.queue(Model(), "m").submit(rows(*range(5)))


def test_split_task_that_does_not_fit_the_queue_is_rejected_whole():
    model = Model(gated=True)
    opts = options(max_batch_size=16, enable_large_batch_splitting=True, max_execution_batch_size=2,
                   max_enqueued_batches=2)
    with BatchScheduler(opts) as scheduler:
        queue = scheduler.queue(model, "m")
        first = hold_the_thread(queue, model)
        with pytest.raises(status.Unavailable, match=QUEUE_FULL_MESSAGE):
            queue.submit(rows(*range(5)))  # needs 3 batches of 2, the queue holds 2
        fits = queue.submit(rows(*range(4)))
        model.release.set()
        outputs = results([first, fits])
    assert model.sizes == [1, 2, 2]
    np.testing.assert_array_equal(outputs[1]["total"], [0, 2, 4, 6])


def test_an_exception_in_the_batch_function_reaches_every_future_of_that_batch_only():
    def model(inputs):
        if (inputs["x"] < 0).any():
            raise status.InvalidArgument("negative input")
        return {"y": inputs["x"] * 2}

    gate = Model(gated=True)

    def gated(inputs):
        gate(inputs)
        return model(inputs)

    with BatchScheduler(options(max_batch_size=2)) as scheduler:
        queue = scheduler.queue(gated, "m")
        first = queue.submit(rows(1))
        assert gate.entered.wait(WAIT)
        bad = [queue.submit(rows(2)), queue.submit(rows(-3))]
        good = [queue.submit(rows(4)), queue.submit(rows(5))]
        gate.release.set()
        assert first.result(WAIT)["y"][0, 0] == 2
        for future in bad:
            with pytest.raises(status.InvalidArgument, match="negative input") as raised:
                future.result(WAIT)
            assert raised.value.code == status.Code.INVALID_ARGUMENT
        assert [f.result(WAIT)["y"][0, 0] for f in good] == [8, 10]
    assert bad[0].exception() is not bad[1].exception()  # each future owns its error


def test_a_non_serving_exception_is_handed_to_the_futures_unchanged():
    def broken(inputs):
        raise ZeroDivisionError("boom")

    with BatchScheduler(options()) as scheduler:
        future = scheduler.queue(broken, "m").submit(rows(1))
        with pytest.raises(ZeroDivisionError, match="boom"):
            future.result(WAIT)


def test_outputs_without_one_row_per_input_row_fail_the_batch_with_internal():
    with BatchScheduler(options()) as scheduler:
        queue = scheduler.queue(lambda inputs: {"y": np.zeros((len(inputs["x"]) + 1, 3))}, "m")
        with pytest.raises(status.Internal, match="0th dimension does not equal the sum of the 0th dimension"
                                                  ".*output 'y' has 0th dimension 3, expected 2"):
            queue.submit(rows(1, 2)).result(WAIT)


def test_scalar_output_fails_the_batch_with_internal():
    with BatchScheduler(options()) as scheduler:
        queue = scheduler.queue(lambda inputs: {"y": np.float32(1.0)}, "m")
        with pytest.raises(status.Internal, match="has 0 dimensions"):
            queue.submit(rows(1)).result(WAIT)


def test_tasks_with_different_non_batch_dims_run_in_separate_batches():
    model = Model(gated=True)
    with BatchScheduler(options(max_batch_size=8)) as scheduler:
        queue = scheduler.queue(model, "m")
        first = hold_the_thread(queue, model)
        narrow, wide, narrow2 = queue.submit(rows(1, width=2)), queue.submit(rows(2, width=5)), \
            queue.submit(rows(3, width=2))
        model.release.set()
        outputs = results([first, narrow, wide, narrow2])
    assert model.sizes == [1, 1, 1, 1]
    assert outputs[2]["y"].shape == (1, 5) and outputs[3]["total"][0] == 6


def test_pad_variable_length_inputs_pads_with_each_tensors_first_element():
    model = Model(gated=True)
    with BatchScheduler(options(max_batch_size=8, pad_variable_length_inputs=True)) as scheduler:
        queue = scheduler.queue(model, "m")
        first = hold_the_thread(queue, model)
        short = queue.submit({"x": np.array([[7, 8]], dtype=np.float32)})
        long = queue.submit({"x": np.array([[1, 2, 3, 4]], dtype=np.float32)})
        model.release.set()
        outputs = results([first, short, long])
    np.testing.assert_array_equal(model.batches[1]["x"], [[7, 8, 7, 7], [1, 2, 3, 4]])
    assert outputs[1]["total"][0] == 29


@pytest.mark.parametrize("inputs, message", [
    ({}, "must have at least one input tensor"),
    ({"x": np.float32(1)}, "must have at least one dimension"),
    ({"x": np.zeros((2, 1)), "z": np.zeros((3, 1))}, "must have equal 0th-dimension size"),
])
def test_malformed_tasks_are_invalid_argument_with_tf_serving_wording(inputs, message):
    with BatchScheduler(options()) as scheduler:
        with pytest.raises(status.InvalidArgument, match=message):
            scheduler.queue(Model(), "m").submit(inputs)


def test_queues_share_the_thread_pool_round_robin():
    order = []
    gate = threading.Event()
    entered = threading.Event()

    def make(name):
        def run(inputs):
            order.append(name)
            if len(order) == 1:
                entered.set()
                assert gate.wait(WAIT)
            return {"y": inputs["x"]}
        return run

    with BatchScheduler(options(max_batch_size=1)) as scheduler:
        busy, quiet = scheduler.queue(make("busy"), "busy"), scheduler.queue(make("quiet"), "quiet")
        futures = [busy.submit(rows(0))]
        assert entered.wait(WAIT)
        futures += [busy.submit(rows(i)) for i in range(1, 4)] + [quiet.submit(rows(9))]
        gate.set()
        results(futures)
    assert order == ["busy", "quiet", "busy", "busy", "busy"]


def test_stop_drains_pending_tasks_instead_of_waiting_for_the_timeout():
    model = Model()
    scheduler = BatchScheduler(options(max_batch_size=100, batch_timeout_micros=60_000_000)).start()
    queue = scheduler.queue(model, "m")
    futures = [queue.submit(rows(i)) for i in range(3)]
    started = time.monotonic()
    scheduler.stop()
    assert time.monotonic() - started < 30  # far below the 60 s batch timeout
    assert all(f.done() for f in futures)
    assert [f.result()["total"][0] for f in futures] == [0, 2, 4]
    with pytest.raises(status.Unavailable, match="not running"):
        queue.submit(rows(1))


def test_queue_close_processes_accepted_tasks_then_rejects_new_ones():
    model = Model()
    with BatchScheduler(options(max_batch_size=100, batch_timeout_micros=60_000_000)) as scheduler:
        queue = scheduler.queue(model, "m")
        future = queue.submit(rows(3))
        queue.close()
        assert future.done() and future.result()["total"][0] == 6
        with pytest.raises(status.Unavailable, match="closed"):
            queue.submit(rows(1))
        other = scheduler.queue(model, "other")  # the scheduler still serves new queues
        later = other.submit(rows(4))
        other.close()
        assert later.result(0)["total"][0] == 8


def test_submit_before_start_is_unavailable_instead_of_hanging():
    scheduler = BatchScheduler(options())
    with pytest.raises(status.Unavailable, match="not running"):
        scheduler.queue(Model(), "m").submit(rows(1))
    scheduler.stop()


def test_a_future_cancelled_while_queued_is_left_out_of_its_batch():
    model = Model(gated=True)
    with BatchScheduler(options(max_batch_size=8)) as scheduler:
        queue = scheduler.queue(model, "m")
        first = hold_the_thread(queue, model)
        kept, dropped = queue.submit(rows(1)), queue.submit(rows(2))
        assert dropped.cancel()
        model.release.set()
        results([first, kept])
    assert model.sizes == [1, 1]
    with pytest.raises(CancelledError):
        dropped.result()


def test_batching_metrics_are_recorded(metrics):
    model = Model(gated=True)
    opts = options(max_batch_size=4, thread_pool_name="pool")
    with BatchScheduler(opts, metrics) as scheduler:
        queue = scheduler.queue(lambda inputs: {**model(inputs)}, "m")
        first = hold_the_thread(queue, model)
        futures = [queue.submit({"x": np.ones((1, 2), np.float32), "w": np.ones((1, 1))}) for _ in range(3)]
        model.release.set()
        results([first, *futures])
    page = metrics.render().decode()
    assert ":tensorflow:serving:batching_session:wrapped_run_count{} 2\n" in page
    # TF Serving's model server labels queuing latency with an empty pool name, whatever the pool.
    assert ':tensorflow:serving:batching_session:queuing_latency_count{thread_pool_name=""} 4\n' in page
    # TF records one input_batch_size sample per input tensor of every task.
    assert ":tensorflow:serving:batching_session:input_batch_size_count{} 7\n" in page
    assert ":tensorflow:serving:batching_session:processed_batch_size_sum{} 4\n" in page
    assert ':tensorflow:serving:batching_session:padding_size_count{execution_batch_size="3"} 1\n' in page


def test_many_concurrent_submitters_each_get_their_own_result():
    model = Model()
    with BatchScheduler(BatchingOptions(max_batch_size=16, num_batch_threads=2)) as scheduler:
        queue = scheduler.queue(model, "m")
        outputs: dict[int, float] = {}

        def client(offset):
            for i in range(offset, offset + 200):
                outputs[i] = queue.submit(rows(i)).result(WAIT)["total"][0]

        threads = [threading.Thread(target=client, args=(k * 1000,)) for k in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
    assert len(outputs) == 3200 and all(total == 2 * i for i, total in outputs.items())
    assert max(model.sizes) <= 16


def test_one_pool_of_num_batch_threads_named_after_the_pool_serves_all_queues():
    with BatchScheduler(BatchingOptions(num_batch_threads=3, thread_pool_name="shared_pool")) as scheduler:
        first, second = scheduler.queue(Model(), "a"), scheduler.queue(Model(), "b")
        results([first.submit(rows(1)), second.submit(rows(2))])
        names = sorted(t.name for t in threading.enumerate() if t.name.startswith("shared_pool_"))
    assert names == ["shared_pool_0", "shared_pool_1", "shared_pool_2"]
    assert not [t for t in threading.enumerate() if t.name.startswith("shared_pool_")]  # stop() joined them


class ThreadRecordingModel(Model):
    """``Model`` that also records the thread each batch ran on; with ``gated`` only the first batch
    waits for ``release``."""

    def __init__(self, gated: bool = False) -> None:
        super().__init__(gated)
        self.threads: list[str] = []

    def __call__(self, inputs):
        self.threads.append(threading.current_thread().name)
        if len(self.threads) > 1:
            x = inputs["x"]
            return {"y": 10 * x + 1, "total": x.reshape(len(x), -1).sum(axis=1)}
        return super().__call__(inputs)


@contextlib.contextmanager
def one_slot_held(**kwargs):
    """Queue "m" of a scheduler with ``options(**kwargs)``, and a waiting caller alone in flight whose
    batch runs at once on its own (pool) thread and stays inside the gated model, holding one slot.
    Yields ``(queue, model)``; on exit the model is released and the held caller gets its rows."""
    model = ThreadRecordingModel(gated=True)
    with BatchScheduler(options(**kwargs)) as scheduler, ThreadPoolExecutor(1) as pool:
        queue = scheduler.queue(model, "m")
        held = pool.submit(lambda: queue.result(queue.submit(rows(1), caller_waits=True), WAIT))
        assert model.entered.wait(WAIT)
        yield queue, model
        model.release.set()
        assert held.result(WAIT)["total"][0] == 2


def test_a_waiting_caller_alone_in_flight_runs_its_batch_on_its_own_thread_without_the_timeout():
    model = ThreadRecordingModel()
    with BatchScheduler(options(max_batch_size=8, batch_timeout_micros=3_600_000_000)) as scheduler:
        queue = scheduler.queue(model, "m")
        future = queue.submit(rows(4), caller_waits=True)
        assert future.done()  # ran inside submit: no batch thread, no one-hour wait
        assert future.result(0)["total"][0] == 8
    assert model.threads == [threading.current_thread().name]


def test_a_caller_run_batch_holds_a_batch_slot_so_no_more_than_num_batch_threads_batches_run():
    with one_slot_held(max_batch_size=8) as (queue, model):
        later = queue.submit(rows(2), caller_waits=True)  # ready (timeout 0), but no slot is free
        assert not later.done() and len(model.batches) == 1
        model.release.set()
        assert later.result(WAIT)["total"][0] == 4
    assert model.threads[0] != model.threads[1] == "model_server_batch_threads_0"


def test_a_waiting_caller_arriving_while_a_batch_runs_waits_for_the_timeout_or_a_full_batch():
    with one_slot_held(max_batch_size=2, batch_timeout_micros=3_600_000_000, num_batch_threads=2) as (queue, model):
        second = queue.submit(rows(2), caller_waits=True)  # a slot is free, but its batch may still grow
        assert not second.done() and len(model.batches) == 1
        third = queue.submit(rows(3), caller_waits=True)  # full: runs now, on this thread (a free slot)
        assert second.result(0)["total"][0] == 4 and third.result(0)["total"][0] == 6
        assert model.threads[1] == threading.current_thread().name


def test_the_caller_that_opens_a_batch_runs_it_on_its_own_thread_when_the_timeout_expires():
    with one_slot_held(max_batch_size=8, batch_timeout_micros=50_000, num_batch_threads=2) as (queue, model):
        leader = queue.submit(rows(2), caller_waits=True)  # a batch runs, so this one waits for its timeout
        assert queue.result(leader, WAIT)["total"][0] == 4
        assert model.threads[1] == threading.current_thread().name  # not a batch thread


def test_a_leading_caller_whose_deadline_passes_hands_its_batch_timeout_to_a_batch_thread():
    with one_slot_held(max_batch_size=8, batch_timeout_micros=300_000, num_batch_threads=2) as (queue, model):
        leader = queue.submit(rows(2), caller_waits=True)  # opens a batch and keeps its timeout
        with pytest.raises(TimeoutError):
            queue.result(leader, 0.0)  # its deadline has passed: nothing runs on this thread
        assert leader.cancel()
        joined = queue.submit(rows(3), caller_waits=True)  # joins that batch, which wakes no one
        assert joined.result(WAIT)["total"][0] == 6  # a batch thread ran the batch at its timeout
        assert not model.release.is_set()  # nothing else happened meanwhile
    assert model.threads[1].startswith("model_server_batch_threads_")
