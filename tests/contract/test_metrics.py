"""Request and batching metrics on the Prometheus page, with TF Serving's names and labels."""
from __future__ import annotations

import re
import threading

import httpx
import pytest

from serving import status
from tests.support.contract import layout
from tests.support.contract.clients import JsonRestClient, StubGrpcClient
from tests.support.contract.helpers import manifest

_SAMPLE = re.compile(r"^([^\s{]+)(?:\{(.*)\})?\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(rest_url: str) -> dict[tuple[str, frozenset], float]:
    """Every sample on the page: (name, labels) -> value."""
    page = httpx.get(rest_url + layout.MONITORING_PATH, timeout=30).text
    samples = {}
    for line in page.splitlines():
        match = _SAMPLE.match(line)
        if match and not line.startswith("#"):
            labels = frozenset(_LABEL.findall(match.group(2) or ""))
            samples[(match.group(1), labels)] = float(match.group(3))
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= set(ls))


def test_request_count_and_latency_by_entrypoint_api_and_status(endpoint):
    images = manifest(endpoint.repo, "digits").sample_inputs()
    before = scrape(endpoint.rest_url)
    grpc_client, rest_client = StubGrpcClient(endpoint.grpc_target), JsonRestClient(endpoint.rest_url)
    try:
        grpc_client.predict("digits", images)
        grpc_client.predict("digits", images)
        rest_client.predict("digits", images)
        with pytest.raises(status.NotFound):  # no version 77: TF Serving's NOT_FOUND
            grpc_client.predict("digits", images, version=77)
    finally:
        grpc_client.close()
        rest_client.close()
    after = scrape(endpoint.rest_url)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    count = ":tensorflow:serving:request_count"
    assert delta(count, model_name="digits", status="OK") == 3
    assert delta(count, model_name="digits", status="NOT_FOUND") == 1
    latency = ":tensorflow:serving:request_latency_count"
    assert delta(latency, model_name="digits", API="Predict", entrypoint="GRPC") == 2
    assert delta(latency, model_name="digits", API="predict", entrypoint="REST") == 1


def test_concurrent_requests_are_batched_and_batching_metrics_show_it(endpoint):
    images = manifest(endpoint.repo, "digits").sample_inputs()
    before = scrape(endpoint.rest_url)
    failures: list[BaseException] = []
    requests_per_thread, threads = 15, 8

    def worker() -> None:
        client = StubGrpcClient(endpoint.grpc_target)
        try:
            for _ in range(requests_per_thread):
                client.predict("digits", images)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            failures.append(exc)
        finally:
            client.close()

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(300)
    assert not failures, failures[:3]
    after = scrape(endpoint.rest_url)
    batches = (value(after, ":tensorflow:serving:batching_session:processed_batch_size_count")
               - value(before, ":tensorflow:serving:batching_session:processed_batch_size_count"))
    tasks = (value(after, ":tensorflow:serving:batching_session:input_batch_size_count")
             - value(before, ":tensorflow:serving:batching_session:input_batch_size_count"))
    assert tasks >= requests_per_thread * threads
    assert 0 < batches < tasks, "concurrent requests should share batches"
    queued = ":tensorflow:serving:batching_session:queuing_latency_count"
    assert value(after, queued) - value(before, queued) >= requests_per_thread * threads
