"""BatchingRunWrapper in process: a real BatchScheduler and a real Servable object, with no model.

A plain Python function (``StandInRun``) stands in for the Session run that
``Servable.run_direct`` would make, so the tests need no SavedModel and no
TensorFlow. Threads are ordered with events and with the scheduler's own rules
(a batch with a one-hour timeout runs only once it is full), never with sleeps.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

import numpy as np
import pytest

from serving import status
from serving.server.batching import QUEUE_FULL_MESSAGE, BatchingOptions, BatchingRunWrapper, BatchScheduler
from serving.server.deadline import deadline_after, remaining_seconds, request_deadline
from serving.server.tensorflow.servable import Servable

WAIT = 60.0  # generous: the machine is shared
SIGNATURE = "serving_default"
ONE_HOUR_MICROS = 3_600_000_000  # a batch with this timeout runs only when full (or its queue closes)


class StandInRun:
    """Stands in for the Session run: ``y = 10 * x + 1`` and ``row = x[:, 0]``; records every batch.

    With ``gated`` the first call holds its batch thread until ``release`` is set.
    """

    def __init__(self, gated: bool = False, error: Exception | None = None) -> None:
        self.batches: list[np.ndarray] = []
        self.calls: list[tuple[str, list[str]]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        if not gated:
            self.release.set()
        self.error = error
        self.lock = threading.Lock()

    def __call__(self, signature_name, inputs, output_keys):
        with self.lock:
            self.batches.append(inputs["x"].copy())
            self.calls.append((signature_name, list(output_keys)))
        self.entered.set()
        assert self.release.wait(WAIT)
        if self.error is not None:
            raise self.error
        x = inputs["x"]
        outputs = {"y": 10 * x + 1, "row": x[:, 0]}
        return {key: outputs[key] for key in output_keys}

    @property
    def sizes(self) -> list[int]:
        return [len(batch) for batch in self.batches]


class StandInSession:
    """The servable's Session, closed after its close callbacks (the batching queues) have run."""

    def close(self) -> None:
        pass


def rows(*values: float) -> dict[str, np.ndarray]:
    return {"x": np.array([[v, v] for v in values], dtype=np.float32)}


def scheduler(**kwargs) -> BatchScheduler:
    return BatchScheduler(BatchingOptions(**{"num_batch_threads": 1, **kwargs}))


@pytest.fixture
def servable():
    servable = Servable("m", 1, "/models/m/1", StandInSession(), {})
    yield servable
    servable.close()


def test_concurrent_calls_are_merged_into_one_run_and_each_caller_gets_its_own_rows(servable):
    run = StandInRun(gated=True)
    with scheduler(max_batch_size=6, batch_timeout_micros=ONE_HOUR_MICROS) as batch_scheduler, \
            ThreadPoolExecutor(4) as pool:
        batched_run = BatchingRunWrapper(batch_scheduler)(servable, run)
        first = pool.submit(batched_run, SIGNATURE, rows(-1), ["row"])
        assert run.entered.wait(WAIT)  # alone in flight, it runs at once and holds the only batch slot
        calls = {base: pool.submit(batched_run, SIGNATURE, rows(*range(base, base + n)), ["y", "row"])
                 for base, n in ((100, 1), (200, 2), (300, 3))}
        run.release.set()
        outputs = {base: call.result(WAIT) for base, call in calls.items()}
        assert first.result(WAIT)["row"][0] == -1
    assert run.sizes == [1, 6]  # one run for the three callers: their batch ran only once it was full
    assert run.calls == [(SIGNATURE, ["row"]), (SIGNATURE, ["y", "row"])]
    for base, n in ((100, 1), (200, 2), (300, 3)):
        np.testing.assert_array_equal(outputs[base]["row"], np.arange(base, base + n))
        np.testing.assert_array_equal(outputs[base]["y"], 10 * rows(*range(base, base + n))["x"] + 1)


def test_a_batch_is_padded_to_the_next_allowed_size_and_the_caller_gets_only_its_rows(servable):
    run = StandInRun()
    with scheduler(max_batch_size=8, allowed_batch_sizes=(2, 4, 8)) as batch_scheduler:
        batched_run = BatchingRunWrapper(batch_scheduler)(servable, run)
        outputs = batched_run(SIGNATURE, rows(1, 2, 3), ["row"])
    assert run.sizes == [4]
    np.testing.assert_array_equal(run.batches[0][:, 0], [1, 2, 3, 1])  # padded with the task's first row
    np.testing.assert_array_equal(outputs["row"], [1, 2, 3])


def test_a_full_queue_refuses_a_call_at_once_with_unavailable(servable):
    run = StandInRun(gated=True)
    with scheduler(max_batch_size=1, max_enqueued_batches=1) as batch_scheduler, ThreadPoolExecutor(3) as pool:
        batched_run = BatchingRunWrapper(batch_scheduler)(servable, run)
        running = pool.submit(batched_run, SIGNATURE, rows(1), ["row"])
        assert run.entered.wait(WAIT)  # the only batch thread is inside the first run
        second = pool.submit(batched_run, SIGNATURE, rows(2), ["row"])
        third = pool.submit(batched_run, SIGNATURE, rows(3), ["row"])
        # The queue holds one batch of one row: whichever call comes first takes it, the other is refused.
        done, _ = wait([second, third], timeout=WAIT, return_when=FIRST_COMPLETED)
        assert len(done) == 1 and not run.release.is_set()  # refused while the run still holds the thread
        refused = done.pop()
        with pytest.raises(status.Unavailable) as raised:
            refused.result()
        assert raised.value.details == QUEUE_FULL_MESSAGE
        run.release.set()
        queued = third if refused is second else second
        assert running.result(WAIT)["row"][0] == 1
        assert queued.result(WAIT)["row"][0] in (2, 3)
    assert run.sizes == [1, 1]


def test_a_deadline_that_expires_while_queued_is_deadline_exceeded_and_never_runs(servable):
    run = StandInRun(gated=True)
    with scheduler() as batch_scheduler, ThreadPoolExecutor(1) as pool:
        batched_run = BatchingRunWrapper(batch_scheduler)(servable, run)
        running = pool.submit(batched_run, SIGNATURE, rows(1), ["row"])
        assert run.entered.wait(WAIT)  # the only batch thread is busy: the next call waits in the queue
        with request_deadline(time.monotonic() + 0.05):
            with pytest.raises(status.DeadlineExceeded, match="Deadline Exceeded"):
                batched_run(SIGNATURE, rows(2), ["row"])
        run.release.set()
        assert running.result(WAIT)["row"][0] == 1
        servable.close()  # drains the queue: the expired task would run now if it were still in it
    assert run.sizes == [1]


@pytest.mark.parametrize("remaining", [None, float("inf"), 9.2e18, 2 * 365 * 24 * 3600.0])
def test_no_deadline_or_one_beyond_the_platforms_range_waits_like_none(servable, remaining):
    # gRPC reports a client without a deadline as ~9.2e18 s remaining; waiting that long overflowed time_t.
    run = StandInRun()
    with scheduler() as batch_scheduler:
        batched_run = BatchingRunWrapper(batch_scheduler)(servable, run)
        with request_deadline(deadline_after(remaining)):
            assert remaining_seconds() is None
            assert batched_run(SIGNATURE, rows(7), ["row"])["row"][0] == 7
        with request_deadline(None if remaining is None else time.monotonic() + remaining):
            assert remaining_seconds() is None
            assert batched_run(SIGNATURE, rows(8), ["row"])["row"][0] == 8


def test_a_run_error_reaches_every_caller_of_that_batch(servable):
    run = StandInRun(gated=True, error=status.InvalidArgument("input x is bad"))
    with scheduler(max_batch_size=3, batch_timeout_micros=ONE_HOUR_MICROS) as batch_scheduler, \
            ThreadPoolExecutor(4) as pool:
        batched_run = BatchingRunWrapper(batch_scheduler)(servable, run)
        first = pool.submit(batched_run, SIGNATURE, rows(-1), ["row"])
        assert run.entered.wait(WAIT)  # alone in flight, it runs at once and holds the only batch slot
        calls = [pool.submit(batched_run, SIGNATURE, rows(i), ["row"]) for i in range(3)]
        run.release.set()
        errors = [call.exception(WAIT) for call in calls]
        assert isinstance(first.exception(WAIT), status.InvalidArgument)
    assert run.sizes == [1, 3]  # one batch of three, and its error went to each of its three callers
    for error in errors:
        assert isinstance(error, status.InvalidArgument) and error.details == "input x is bad"
    assert len({id(error) for error in errors}) == 3  # each caller owns its error


def test_closing_the_servable_drains_and_closes_its_queues_and_leaves_other_servables_batching(servable):
    run = StandInRun(gated=True)
    other = Servable("m", 2, "/models/m/2", StandInSession(), {})
    with scheduler(max_batch_size=1, max_enqueued_batches=1) as batch_scheduler, ThreadPoolExecutor(3) as pool:
        wrapper = BatchingRunWrapper(batch_scheduler)
        batched_run, other_run = wrapper(servable, run), wrapper(other, StandInRun())
        running = pool.submit(batched_run, SIGNATURE, rows(1), ["row"])
        assert run.entered.wait(WAIT)
        calls = [pool.submit(batched_run, SIGNATURE, rows(i), ["row"]) for i in (2, 3)]
        done, _ = wait(calls, timeout=WAIT, return_when=FIRST_COMPLETED)  # one refused: the other is queued
        assert len(done) == 1
        closer = threading.Thread(target=servable.close)
        closer.start()
        run.release.set()
        closer.join(WAIT)
        assert not closer.is_alive()
        assert run.sizes == [1, 1]  # close() returned only after the queued call had run
        with pytest.raises(status.Unavailable, match="Servable m version 1 has been unloaded"):
            batched_run(SIGNATURE, rows(4), ["row"])
        assert running.result(WAIT)["row"][0] == 1
        assert other_run(SIGNATURE, rows(5), ["row"])["row"][0] == 5
        other.close()
