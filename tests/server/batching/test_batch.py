"""TaskFuture (the queue's lean future) and the batch-of-one path of ``split_outputs``.

Threads are ordered with Events and joins, never sleeps.
"""
from __future__ import annotations

import threading
from concurrent.futures import CancelledError

import numpy as np
import pytest

from serving import status
from serving.server.batching.batch import TaskFuture, split_outputs

WAIT = 60.0


def test_a_task_future_cancelled_before_its_batch_starts_is_left_out():
    future = TaskFuture()
    assert future.cancel() and future.cancel()  # idempotent, as concurrent.futures.Future
    assert future.done() and future.cancelled()
    assert not future.set_running_or_notify_cancel()  # the batch leaves it out
    with pytest.raises(CancelledError):
        future.result(0)
    with pytest.raises(CancelledError):
        future.exception(0)


def test_a_task_future_whose_batch_has_started_cannot_be_cancelled():
    future = TaskFuture()
    assert future.set_running_or_notify_cancel()
    assert future.running() and not future.cancel() and not future.done()
    future.set_result({"y": np.ones(1)})
    assert future.done() and not future.cancel() and future.result(0)["y"][0] == 1


def test_a_pending_task_future_times_out_with_the_builtin_timeout_error():
    future = TaskFuture()
    with pytest.raises(TimeoutError):
        future.result(0)
    with pytest.raises(TimeoutError):
        future.exception(0.0)
    assert not future.wait(0) and not future.done()


def test_every_thread_waiting_on_a_task_future_gets_the_result():
    future = TaskFuture()
    waiting = [threading.Event() for _ in range(3)]
    got = []

    def waiter(ready: threading.Event) -> None:
        ready.set()
        got.append(future.result(WAIT)["y"][0])

    threads = [threading.Thread(target=waiter, args=(ready,)) for ready in waiting]
    for thread in threads:
        thread.start()
    assert all(ready.wait(WAIT) for ready in waiting)
    assert future.set_running_or_notify_cancel()
    future.set_result({"y": np.array([7])})
    for thread in threads:
        thread.join(WAIT)
    assert got == [7, 7, 7]


def test_a_task_future_carries_its_error():
    future = TaskFuture()
    error = status.Internal("boom")
    assert future.set_running_or_notify_cancel()
    future.set_exception(error)
    assert future.exception(0) is error
    with pytest.raises(status.Internal, match="boom"):
        future.result(0)


def test_a_batch_of_one_task_without_padding_gets_the_outputs_as_they_are():
    outputs = {"y": np.arange(6).reshape(3, 2), "z": np.arange(3)}
    (piece,) = split_outputs(outputs, [3], 3)
    assert piece["y"] is outputs["y"] and piece["z"] is outputs["z"]  # no slicing, no copy


def test_a_batch_of_one_padded_task_gets_only_its_rows():
    outputs = {"y": np.arange(8).reshape(4, 2)}
    (piece,) = split_outputs(outputs, [3], 4)
    assert piece["y"].tolist() == [[0, 1], [2, 3], [4, 5]]
