"""--enable_grpc_healthcheck_service: the standard health service, checked with the official grpc_health.v1 stubs.

TF Serving (``model_servers/server.cc``) marks "ModelService" and
"PredictionService" SERVING; gRPC's default health service answers SERVING
for "" and NOT_FOUND for any other name.
"""
from __future__ import annotations

from typing import Iterator

import grpc
import pytest

health_pb2 = pytest.importorskip("grpc_health.v1.health_pb2")
health_pb2_grpc = pytest.importorskip("grpc_health.v1.health_pb2_grpc")

from serving.server.frontends.grpc import GrpcFrontend  # noqa: E402


def _stub(frontend: GrpcFrontend) -> Iterator:
    with grpc.insecure_channel(f"127.0.0.1:{frontend.bound_ports[0]}") as channel:
        yield health_pb2_grpc.HealthStub(channel)


@pytest.fixture
def health(dataplane) -> Iterator:
    frontend = GrpcFrontend(dataplane, ["127.0.0.1:0"], max_threads=2, enable_health_service=True)
    frontend.start()
    yield from _stub(frontend)
    frontend.stop(grace=1)


@pytest.mark.parametrize("service", ["", "ModelService", "PredictionService"])
def test_the_server_and_tf_servings_two_services_are_serving(health, service):
    response = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
    assert response.status == health_pb2.HealthCheckResponse.SERVING


def test_an_unregistered_service_is_not_found(health):
    with pytest.raises(grpc.RpcError) as info:
        health.Check(health_pb2.HealthCheckRequest(service="tensorflow.serving.Nope"), timeout=10)
    assert info.value.code() is grpc.StatusCode.NOT_FOUND
    assert info.value.details() == "service name unregistered"


def test_watch_sends_the_current_status(health):
    first = next(iter(health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=10)))
    assert first.status == health_pb2.HealthCheckResponse.SERVING
    unknown = next(iter(health.Watch(health_pb2.HealthCheckRequest(service="x"), timeout=10)))
    assert unknown.status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


def test_without_the_flag_there_is_no_health_service(grpc_frontend):
    for stub in _stub(grpc_frontend):
        with pytest.raises(grpc.RpcError) as info:
            stub.Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert info.value.code() is grpc.StatusCode.UNIMPLEMENTED
