"""The standard gRPC health service (``grpc.health.v1.Health``), as ``--enable_grpc_healthcheck_service`` serves it.

TF Serving (``model_servers/server.cc``) turns on gRPC's default health
service and marks ``"ModelService"`` and ``"PredictionService"`` SERVING;
the default service answers SERVING for the empty service name (the whole
server) from the start. Those three names are the ones served here, spelled
as TF Serving spells them (not package-qualified): a client that passes
against this server passes against TF Serving. Any other name is NOT_FOUND
``service name unregistered``, gRPC's default service's answer. ``Watch``
sends the current status (SERVICE_UNKNOWN for another name) and ends the
stream: the statuses never change while the server runs, and a stream held
open would hold one of the server's few request threads per watcher (gRPC's
C++ service holds it open without a thread). This is the one difference.

The two messages are built from their descriptor in a private descriptor
pool, so the service needs neither ``grpcio-health-checking`` nor generated
code at run time and cannot clash with the official stubs in one process;
the wire format is the official ``grpc/health/v1/health.proto``.
"""
from __future__ import annotations

from typing import Any, Iterator

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = ["HEALTH_SERVICE", "SERVING_SERVICE_NAMES", "HealthService"]

HEALTH_SERVICE = "grpc.health.v1.Health"
SERVING_SERVICE_NAMES = ("", "ModelService", "PredictionService")
_SERVING = 1          # HealthCheckResponse.ServingStatus.SERVING
_SERVICE_UNKNOWN = 3  # HealthCheckResponse.ServingStatus.SERVICE_UNKNOWN (Watch only)


def _health_messages() -> tuple[Any, Any]:
    """``HealthCheckRequest`` and ``HealthCheckResponse`` classes, from a private pool."""
    proto = descriptor_pb2.FileDescriptorProto(name="grpc/health/v1/health.proto", package="grpc.health.v1",
                                               syntax="proto3")
    request = proto.message_type.add(name="HealthCheckRequest")
    request.field.add(name="service", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    response = proto.message_type.add(name="HealthCheckResponse")
    enum = response.enum_type.add(name="ServingStatus")
    for number, name in enumerate(("UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN")):
        enum.value.add(name=name, number=number)
    response.field.add(name="status", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_ENUM,
                       type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus",
                       label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse")))


HealthCheckRequest, HealthCheckResponse = _health_messages()


class HealthService:
    """``Check`` and ``Watch`` for the three names TF Serving marks SERVING."""

    def handler(self) -> grpc.GenericRpcHandler:
        """The generic handler to add to a ``grpc.Server``."""
        return grpc.method_handlers_generic_handler(HEALTH_SERVICE, {
            "Check": grpc.unary_unary_rpc_method_handler(
                self.check, request_deserializer=HealthCheckRequest.FromString,
                response_serializer=HealthCheckResponse.SerializeToString),
            "Watch": grpc.unary_stream_rpc_method_handler(
                self.watch, request_deserializer=HealthCheckRequest.FromString,
                response_serializer=HealthCheckResponse.SerializeToString),
        })

    def check(self, request, context: grpc.ServicerContext):
        if request.service not in SERVING_SERVICE_NAMES:
            context.abort(grpc.StatusCode.NOT_FOUND, "service name unregistered")
        return HealthCheckResponse(status=_SERVING)

    def watch(self, request, context: grpc.ServicerContext) -> Iterator:
        known = request.service in SERVING_SERVICE_NAMES
        yield HealthCheckResponse(status=_SERVING if known else _SERVICE_UNKNOWN)
