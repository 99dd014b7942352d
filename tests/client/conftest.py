"""Client test fixtures: one fake backend behind a real gRPC and a real HTTP server."""
from __future__ import annotations

import os

import pytest

from tests.support.fake_serving import Backend, FakeGrpcServer, FakeRestServer


@pytest.fixture(scope="session")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow  # TensorFlow: only once the fake servers start (they build answers with it)
    return tensorflow


@pytest.fixture(scope="session")
def _servers(tf):
    backend = Backend()
    grpc_server = FakeGrpcServer(backend, tf).start()
    rest_server = FakeRestServer(backend).start()
    yield backend, grpc_server, rest_server
    grpc_server.stop()
    rest_server.stop()


@pytest.fixture
def backend(_servers):
    """The shared backend, reset for each test."""
    backend = _servers[0]
    backend.failures.clear()
    backend.calls.clear()
    backend.requests.clear()
    backend.reload_configs.clear()
    backend.headers.clear()
    backend.delay = 0.0
    return backend


@pytest.fixture
def grpc_target(_servers, backend) -> str:
    return _servers[1].target


@pytest.fixture
def rest_url(_servers, backend) -> str:
    return _servers[2].url
