"""Fixtures of the server tests: the tiny model exported once per session, served in process.

In process: ``tiny_manager`` is a real ``ServableManager`` serving ``tiny``
version 1; ``dataplane`` is a ``DataPlane`` over it with fresh ``metrics``;
``grpc_frontend`` / ``rest_frontend`` run each front-end on a free port with
that data plane.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from prometheus_client import CollectorRegistry

from serving.server.core.manager import ServableManager
from serving.server.frontends.dataplane import DataPlane
from serving.server.frontends.grpc import GrpcFrontend
from serving.server.frontends.rest import RestFrontend
from serving.launcher import free_port
from serving.server.metrics import ServerMetrics
from tests.support.serving import MONITORING_PATH, tiny_manager_on, tiny_repo_at


@pytest.fixture(scope="session")
def tiny_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository root with model ``tiny`` at version 1 and a monitoring config (Prometheus on)."""
    return tiny_repo_at(tmp_path_factory.mktemp("frontend-models"))


@pytest.fixture(scope="session")
def tiny_manager(tiny_repo: Path) -> Iterator[ServableManager]:
    """A real ``ServableManager`` in this process, ``tiny`` version 1 AVAILABLE."""
    with tiny_manager_on(tiny_repo) as manager:
        yield manager


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
