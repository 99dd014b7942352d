"""A new version published under concurrent load is picked up with zero failed requests."""
from __future__ import annotations

import threading
import time

from tests.contract import layout
from tests.contract.clients import JsonRestClient, StubGrpcClient, VersionState
from tests.contract.helpers import manifest


def test_new_version_under_concurrent_load_has_zero_failed_requests(endpoint):
    images = manifest(endpoint.repo, "digits").sample_inputs(batch_size=2)
    stop = threading.Event()
    failures: list[BaseException] = []
    answered_by: dict[int, int] = {}
    counts = {"ok": 0}
    lock = threading.Lock()

    def grpc_worker() -> None:
        client = StubGrpcClient(endpoint.grpc_target)
        try:
            while not stop.is_set():
                client.predict("digits_live", images, timeout=60)
                with lock:
                    version = client.last_model_spec.version.value
                    answered_by[version] = answered_by.get(version, 0) + 1
                    counts["ok"] += 1
        except BaseException as exc:  # noqa: BLE001 - any failure fails the test
            failures.append(exc)
        finally:
            client.close()

    def rest_worker() -> None:
        client = JsonRestClient(endpoint.rest_url)
        try:
            while not stop.is_set():
                client.predict("digits_live", images)
                with lock:
                    counts["ok"] += 1
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)
        finally:
            client.close()

    workers = [threading.Thread(target=w) for w in (grpc_worker, grpc_worker, rest_worker, rest_worker)]
    for thread in workers:
        thread.start()
    try:
        time.sleep(1.0)
        layout.publish_version(endpoint.repo / "live" / "1", endpoint.repo / "live", 2)
        deadline = time.monotonic() + 180
        status_client = StubGrpcClient(endpoint.grpc_target)
        try:
            while status_client.status("digits_live")[0] != VersionState(2, "AVAILABLE", "OK") or \
                    any(s.state == "AVAILABLE" for s in status_client.status("digits_live")[1:]):
                assert time.monotonic() < deadline, status_client.status("digits_live")
                assert not failures, failures[:3]
                time.sleep(0.2)
        finally:
            status_client.close()
        time.sleep(1.0)
    finally:
        stop.set()
        for thread in workers:
            thread.join(120)
    assert not failures, failures[:3]
    assert answered_by.get(1, 0) > 0 and answered_by.get(2, 0) > 0, answered_by
    assert counts["ok"] > 20
