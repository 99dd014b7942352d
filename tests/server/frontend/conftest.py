"""Fixtures: the tiny model exported once per session, served by the embedded server or in process.

In process: ``tiny_manager`` is a real ``ServableManager`` serving ``tiny``
version 1; ``dataplane`` is a ``DataPlane`` over it with fresh ``metrics``;
``grpc_frontend`` / ``rest_frontend`` run each front-end on a free port with
that data plane.

``metric_total`` and ``wait_until`` wait for what a server shows (a metric, a listener
closing) instead of sleeping.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import httpx
import pytest
from prometheus_client import CollectorRegistry
from tensorflow_serving.apis import input_pb2

from serving import codec
from serving.server.core.manager import ServableManager
from serving.server.frontends.dataplane import DataPlane
from serving.server.frontends.grpc import GrpcFrontend
from serving.server.frontends.rest import RestFrontend
from serving.server.launcher import free_port
from serving.server.metrics import ServerMetrics
from serving.server.server import single_model_config
from serving.server.tensorflow.loader import LoaderOptions, SavedModelLoader
from tests.server.frontend.tiny import export_tiny
from tests.support.servers import EmbeddedServer

MONITORING_PATH = "/monitoring/prometheus/metrics"


@pytest.fixture(scope="session")
def tiny_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository root with model ``tiny`` at version 1 (exported in a subprocess-free TF call)."""
    root = tmp_path_factory.mktemp("frontend-models")
    export_tiny(root / "tiny" / "1")
    (root / "monitoring.config").write_text(f'prometheus_config {{ enable: true, path: "{MONITORING_PATH}" }}\n')
    return root


def tiny_flags(repo: Path, *extra: str) -> list[str]:
    """TF Serving flags serving ``tiny`` from ``repo`` with Prometheus on."""
    return ["--model_name=tiny", f"--model_base_path={repo / 'tiny'}",
            f"--monitoring_config_file={repo / 'monitoring.config'}", *extra]


@pytest.fixture(scope="session")
def tiny_manager(tiny_repo: Path) -> Iterator[ServableManager]:
    """A real ``ServableManager`` in this process, ``tiny`` version 1 AVAILABLE."""
    manager = ServableManager(SavedModelLoader(LoaderOptions()), file_system_poll_wait_seconds=60.0)
    manager.start()
    try:
        manager.reload_config(single_model_config("tiny", str(tiny_repo / "tiny")), timeout=120)
        yield manager
    finally:
        manager.stop(drain_timeout=5)


@pytest.fixture
def metrics() -> ServerMetrics:
    return ServerMetrics(CollectorRegistry())


@pytest.fixture
def dataplane(tiny_manager: ServableManager, metrics: ServerMetrics) -> DataPlane:
    return DataPlane(tiny_manager, metrics)


@pytest.fixture
def grpc_frontend(dataplane: DataPlane) -> Iterator[GrpcFrontend]:
    """The gRPC front-end on a free port of 127.0.0.1 (``.bound_ports[0]``)."""
    frontend = GrpcFrontend(dataplane, ["127.0.0.1:0"], max_threads=4)
    frontend.start()
    yield frontend
    frontend.stop(grace=1)


@pytest.fixture
def rest_url(dataplane: DataPlane, metrics: ServerMetrics) -> Iterator[str]:
    """The REST front-end on a free port, Prometheus at ``MONITORING_PATH``; yields its base URL."""
    port = free_port()
    frontend = RestFrontend(dataplane, port=port, host="127.0.0.1", num_threads=2,
                            monitoring_path=MONITORING_PATH, metrics=metrics)
    frontend.start()
    yield f"http://127.0.0.1:{port}"
    frontend.stop(grace=1)


def examples_input(rows: Sequence[Mapping[str, Any]], context: Optional[Mapping[str, Any]] = None) -> input_pb2.Input:
    """A ``tensorflow.serving.Input`` carrying ``rows`` as tf.Examples (and ``context``)."""
    request_input = input_pb2.Input()
    target = request_input.example_list
    if context is not None:
        target = request_input.example_list_with_context
        codec.example_from_dict(context, target.context)
    for row in rows:
        codec.example_from_dict(row, target.examples.add())
    return request_input


def metric_total(server: EmbeddedServer, name: str) -> float:
    """``name`` summed over its label sets, read from the server's Prometheus page."""
    page = httpx.get(server.rest_url + MONITORING_PATH, timeout=60).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in page.splitlines()
               if line.split("{", 1)[0].split(" ", 1)[0] == name)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``condition`` (something the server shows) until it holds; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)
