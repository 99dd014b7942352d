"""--enable_batching at the front-ends: full queue 503 / UNAVAILABLE at once, oversize refused or split."""
from __future__ import annotations

import threading
import time

import httpx
import numpy as np
import pytest

from serving import status
from tests.support.contract.clients import StubGrpcClient
from tests.support.serving import MONITORING_PATH, metric_total, tiny_flags
from tests.support.wait import wait_until
from tests.support.servers import EmbeddedServer

RUNNING_SECONDS = 6.0   # how long the request holding the only batch thread runs
# TF Serving's batching metrics order the threads below: a task's input size is recorded as it is
# submitted (just before it takes its queue slot), a batch's processed size as a batch thread starts it.
SUBMITTED = ":tensorflow:serving:batching_session:input_batch_size_count"
STARTED = ":tensorflow:serving:batching_session:processed_batch_size_count"


def _wait_for_metric(server: EmbeddedServer, name: str, at_least: float) -> None:
    wait_until(lambda: metric_total(server, name) >= at_least, f"{name} >= {at_least}")


def _batching_server(repo, name: str, parameters: str) -> EmbeddedServer:
    path = repo / f"{name}.batching.config"
    path.write_text(parameters)
    return EmbeddedServer(tiny_flags(repo, "--enable_batching", f"--batching_parameters_file={path}"),
                          wait_for=["tiny"])


@pytest.fixture(scope="module")
def one_slot(tiny_repo):
    """One batch thread, batches of one, one batch may wait: the third concurrent request finds it full."""
    with _batching_server(tiny_repo, "one-slot", "max_batch_size { value: 1 }\nbatch_timeout_micros { value: 0 }\n"
                          "max_enqueued_batches { value: 1 }\nnum_batch_threads { value: 1 }\n") as server:
        yield server


def test_full_queue_is_503_unavailable_at_once_and_queued_work_completes(one_slot):
    answers: dict[str, httpx.Response] = {}

    def call(key: str, seconds: float) -> None:
        answers[key] = httpx.post(f"{one_slot.rest_url}/v1/models/tiny:predict", timeout=60,
                                  json={"signature_name": "sleep", "instances": [seconds]})

    submitted, started_batches = metric_total(one_slot, SUBMITTED), metric_total(one_slot, STARTED)
    running = threading.Thread(target=call, args=("running", RUNNING_SECONDS))
    running.start()
    _wait_for_metric(one_slot, STARTED, started_batches + 1)   # "running" occupies the only batch thread
    queued = threading.Thread(target=call, args=("queued", 0.0))
    queued.start()
    _wait_for_metric(one_slot, SUBMITTED, submitted + 2)       # "queued" fills the only queue slot
    started = time.monotonic()
    rejected = httpx.post(f"{one_slot.rest_url}/v1/models/tiny:predict", timeout=60,
                          json={"signature_name": "sleep", "instances": [0.0]})
    rejected_after = time.monotonic() - started
    running.join(60)
    queued.join(60)
    assert rejected.status_code == 503, rejected.text
    assert rejected.json() == {"error": "The batch scheduling queue to which this task was submitted is full"}
    assert rejected_after < RUNNING_SECONDS - 3.0, "a full queue must answer at once, not after the running batch"
    assert answers["running"].status_code == 200 and answers["queued"].status_code == 200


@pytest.mark.slow   # the REST twin above stays in the fast tier
def test_full_queue_over_grpc_is_unavailable(one_slot):
    client = StubGrpcClient(one_slot.grpc_target)
    seconds = lambda s: {"seconds": np.array([s], np.float32)}  # noqa: E731
    running = threading.Thread(target=client.predict, args=("tiny", seconds(RUNNING_SECONDS)),
                               kwargs={"signature": "sleep"})
    queued = threading.Thread(target=client.predict, args=("tiny", seconds(0.0)), kwargs={"signature": "sleep"})
    submitted, started_batches = metric_total(one_slot, SUBMITTED), metric_total(one_slot, STARTED)
    try:
        running.start()
        _wait_for_metric(one_slot, STARTED, started_batches + 1)
        queued.start()
        _wait_for_metric(one_slot, SUBMITTED, submitted + 2)
        with pytest.raises(status.Unavailable):
            client.predict("tiny", seconds(0.0), signature="sleep")
    finally:
        running.join(60)
        queued.join(60)
        client.close()


def test_request_larger_than_max_batch_size_is_refused_as_tf_serving_refuses_it(one_slot):
    response = httpx.post(f"{one_slot.rest_url}/v1/models/tiny:predict", timeout=60,
                          json={"instances": [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]})
    assert response.status_code == 400
    assert response.json() == {"error": "Task size 2 is larger than maximum input batch size 1"}


def _request_count(server: EmbeddedServer, code: str) -> float:
    prefix = f':tensorflow:serving:request_count{{model_name="tiny",status="{code}"}} '
    page = httpx.get(server.rest_url + MONITORING_PATH, timeout=60).text
    return sum(float(line[len(prefix):]) for line in page.splitlines() if line.startswith(prefix))


def test_grpc_deadline_bounds_the_wait_in_the_batch_queue(one_slot):
    """The server itself gives up at the deadline: the queued call ends DEADLINE_EXCEEDED, not OK later."""
    before = {code: _request_count(one_slot, code) for code in ("OK", "DEADLINE_EXCEEDED")}
    started_batches = metric_total(one_slot, STARTED)
    client = StubGrpcClient(one_slot.grpc_target)
    running = threading.Thread(target=client.predict,
                               args=("tiny", {"seconds": np.array([RUNNING_SECONDS], np.float32)}),
                               kwargs={"signature": "sleep"})
    try:
        running.start()
        _wait_for_metric(one_slot, STARTED, started_batches + 1)
        with pytest.raises(status.DeadlineExceeded):
            client.predict("tiny", {"x": np.ones((1, 3), np.float32)}, timeout=0.5)
    finally:
        running.join(60)
        client.close()
    # The client's own deadline may fire a moment before the server records its answer.
    wait_until(lambda: _request_count(one_slot, "DEADLINE_EXCEEDED") > before["DEADLINE_EXCEEDED"],
                "the server records the DEADLINE_EXCEEDED request")
    assert _request_count(one_slot, "DEADLINE_EXCEEDED") - before["DEADLINE_EXCEEDED"] == 1
    assert _request_count(one_slot, "OK") - before["OK"] == 1   # only the running call


def test_large_batch_splitting_serves_requests_larger_than_an_execution_batch(tiny_repo):
    # TF's rule: with splitting, max_batch_size bounds a request, max_execution_batch_size a run.
    with _batching_server(tiny_repo, "split", "max_batch_size { value: 8 }\nbatch_timeout_micros { value: 0 }\n"
                          "enable_large_batch_splitting { value: true }\n"
                          "max_execution_batch_size { value: 2 }\nnum_batch_threads { value: 1 }\n") as server:
        rows = [[float(i), 0.0, 1.0] for i in range(5)]
        response = httpx.post(f"{server.rest_url}/v1/models/tiny:predict", timeout=60, json={"instances": rows})
        page = httpx.get(server.rest_url + MONITORING_PATH, timeout=60).text
    assert response.status_code == 200, response.text
    runs = [line for line in page.splitlines()
            if line.startswith(":tensorflow:serving:batching_session:processed_batch_size_count")]
    assert runs and float(runs[0].split()[-1]) >= 3, runs   # 5 rows in runs of at most 2
    assert [p["total"] for p in response.json()["predictions"]] == [2.0 * (i + 1) for i in range(5)]


def test_enable_batching_without_a_parameters_file_serves_with_tf_defaults(tiny_repo):
    with EmbeddedServer(tiny_flags(tiny_repo, "--enable_batching"), wait_for=["tiny"]) as server:
        answer = httpx.post(f"{server.rest_url}/v1/models/tiny:predict", timeout=60,
                            json={"signature_name": "sleep", "instances": [0.0]})
    assert answer.status_code == 200, answer.text
