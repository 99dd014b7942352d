"""A new version published under concurrent load is picked up with zero failed requests."""
from __future__ import annotations

import threading
import time

from serving.codec import VersionStatus
from tests.support.contract import layout
from tests.support.contract.clients import JsonRestClient, StubGrpcClient
from tests.support.contract.helpers import manifest

WORKERS = 4


def test_new_version_under_concurrent_load_has_zero_failed_requests(endpoint):
    images = manifest(endpoint.repo, "digits").sample_inputs(batch_size=2)
    stop = threading.Event()
    failures: list[BaseException] = []
    answered_by: dict[int, int] = {}
    counts = {"ok": 0}
    answered = [0] * WORKERS             # requests each worker has had answered
    progress = threading.Condition()     # notified on every answer and every failure

    def answer(worker: int, version: int | None = None) -> None:
        with progress:
            if version is not None:
                answered_by[version] = answered_by.get(version, 0) + 1
            counts["ok"] += 1
            answered[worker] += 1
            progress.notify_all()

    def fail(exc: BaseException) -> None:
        with progress:
            failures.append(exc)
            progress.notify_all()

    def grpc_worker(worker: int) -> None:
        client = StubGrpcClient(endpoint.grpc_target)
        try:
            while not stop.is_set():
                client.predict("digits_live", images, timeout=60)
                answer(worker, client.last_model_spec.version.value)
        except BaseException as exc:  # noqa: BLE001 - any failure fails the test
            fail(exc)
        finally:
            client.close()

    def rest_worker(worker: int) -> None:
        client = JsonRestClient(endpoint.rest_url)
        try:
            while not stop.is_set():
                client.predict("digits_live", images)
                answer(worker)
        except BaseException as exc:  # noqa: BLE001
            fail(exc)
        finally:
            client.close()

    def each_worker_answers_again(times: int, timeout: float = 120) -> None:
        """Wait until every worker has had ``times`` requests answered that it sent after this call."""
        with progress:
            wanted = [n + 1 + times for n in answered]  # the one in flight now was sent before
            progress.wait_for(lambda: failures or all(a >= w for a, w in zip(answered, wanted)), timeout)
            assert not failures, failures[:3]
            assert all(a >= w for a, w in zip(answered, wanted)), (answered, wanted)

    workers = [threading.Thread(target=w, args=(i,))
               for i, w in enumerate((grpc_worker, grpc_worker, rest_worker, rest_worker))]
    for thread in workers:
        thread.start()
    try:
        each_worker_answers_again(1)   # load on version 1 before the new version appears
        layout.publish_version(endpoint.repo / "live" / "1", endpoint.repo / "live", 2)
        deadline = time.monotonic() + 180
        status_client = StubGrpcClient(endpoint.grpc_target)
        try:
            # Poll the server's own version states: 2 AVAILABLE, 1 no longer (its unload under load).
            while True:
                states = status_client.status("digits_live")
                if states[0] == VersionStatus(2, "AVAILABLE") and \
                        not any(s.state == "AVAILABLE" for s in states[1:]):
                    break
                assert time.monotonic() < deadline, states
                assert not failures, failures[:3]
                time.sleep(0.2)
        finally:
            status_client.close()
        each_worker_answers_again(3)   # load on version 2 alone
    finally:
        stop.set()
        for thread in workers:
            thread.join(120)
    assert not failures, failures[:3]
    assert answered_by.get(1, 0) > 0 and answered_by.get(2, 0) > 0, answered_by
    assert counts["ok"] > 20
