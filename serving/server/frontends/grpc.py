"""gRPC front-end: TF Serving's ``PredictionService`` and ``ModelService`` on the official stubs.

Each handler decodes the request, makes one ``DataPlane`` call and encodes
the answer. Errors leave through one place (``_rpc``): the canonical code is
copied numerically into the gRPC status and the message truncated as
``model_servers/grpc_status_util.cc`` does. The server accepts messages up
to int32 max both ways (``server.cc`` ``SetMaxMessageSize``) and honours the
client's deadline.
"""
from __future__ import annotations

import functools
import logging
import time
from concurrent import futures
from typing import Any, Callable, Optional, Sequence

import grpc

from serving import codec, status
from serving.server.frontends.dataplane import DataPlane, ModelSpec

__all__ = ["GrpcFrontend", "MAX_MESSAGE_LENGTH", "parse_channel_arguments"]

logger = logging.getLogger(__name__)

MAX_MESSAGE_LENGTH = 2**31 - 1


def parse_channel_arguments(text: str) -> list[tuple[str, Any]]:
    """``--grpc_channel_arguments``: comma-separated ``key=value``; ints passed as ints."""
    arguments: list[tuple[str, Any]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, value = item.partition("=")
        try:
            arguments.append((key.strip(), int(value)))
        except ValueError:
            arguments.append((key.strip(), value.strip()))
    return arguments


def _rpc(method: Callable) -> Callable:
    """Map ``ServingError`` (and anything unexpected) to a gRPC status, once."""
    @functools.wraps(method)
    def handler(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except status.ServingError as exc:
            context.abort(status.to_grpc_status(exc.code), status.truncate_for_grpc(exc.details))
        except Exception as exc:  # noqa: BLE001 - every failure must become a status
            logger.exception("%s failed", method.__name__)
            context.abort(grpc.StatusCode.INTERNAL, status.truncate_for_grpc(f"{type(exc).__name__}: {exc}"))
    return handler


def _spec(model_spec: Any) -> ModelSpec:
    version = model_spec.version.value if model_spec.HasField("version") else None
    return ModelSpec(model_spec.name, version, model_spec.version_label or None, model_spec.signature_name)


def _deadline(context: grpc.ServicerContext) -> Optional[float]:
    remaining = context.time_remaining()
    return None if remaining is None else time.monotonic() + remaining


def _to_arrays(tensors: Any) -> dict:
    arrays = {}
    for name, proto in tensors.items():
        try:
            arrays[name] = codec.tensor_proto_to_ndarray(proto)
        except ValueError as exc:
            raise status.InvalidArgument(f"Input tensor {name!r} is not a valid TensorProto: {exc}") from exc
    return arrays


class _PredictionService:
    def __init__(self, dataplane: DataPlane, use_tensor_content: bool) -> None:
        from tensorflow_serving.apis import predict_pb2

        self._dp = dataplane
        self._predict_pb2 = predict_pb2
        self._use_tensor_content = use_tensor_content

    @_rpc
    def Predict(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self._dp.track(request.model_spec.name, "Predict", "GRPC"):
            result = self._dp.predict(_spec(request.model_spec), _to_arrays(request.inputs),
                                      list(request.output_filter), deadline=_deadline(context))
        response = self._predict_pb2.PredictResponse()
        response.model_spec.name = result.name
        response.model_spec.version.value = result.version
        response.model_spec.signature_name = result.signature_name
        for name, array in result.outputs.items():
            codec.ndarray_to_tensor_proto(array, response.outputs[name],
                                          use_tensor_content=self._use_tensor_content)
        return response

    @_rpc
    def Classify(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self._dp.track(request.model_spec.name, "Classify", "GRPC"):
            return self._dp.classify(_spec(request.model_spec), request.input, deadline=_deadline(context))

    @_rpc
    def Regress(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self._dp.track(request.model_spec.name, "Regress", "GRPC"):
            return self._dp.regress(_spec(request.model_spec), request.input, deadline=_deadline(context))

    @_rpc
    def MultiInference(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._dp.multi_inference(request, deadline=_deadline(context))

    @_rpc
    def GetModelMetadata(self, request: Any, context: grpc.ServicerContext) -> Any:
        if not request.HasField("model_spec"):
            raise status.InvalidArgument("Missing ModelSpec")
        return self._dp.model_metadata(_spec(request.model_spec), list(request.metadata_field))


class _ModelService:
    def __init__(self, dataplane: DataPlane) -> None:
        self._dp = dataplane

    @_rpc
    def GetModelStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        if not request.HasField("model_spec"):
            raise status.InvalidArgument("Missing ModelSpec")
        return self._dp.model_status(_spec(request.model_spec))

    def HandleReloadConfigRequest(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Reload; like TF Serving, the status is both in the response and the RPC status."""
        from tensorflow_serving.apis import model_management_pb2

        response = model_management_pb2.ReloadConfigResponse()
        try:
            self._dp.reload_config(request.config)
        except status.ServingError as exc:
            logger.error("ReloadConfig failed: %s", exc.details)
            response.status.error_code = int(exc.code)
            response.status.error_message = exc.details
            context.set_code(status.to_grpc_status(exc.code))
            context.set_details(status.truncate_for_grpc(exc.details))
        return response


class GrpcFrontend:
    """A ``grpc.server`` serving both services; ``start()`` / ``stop(grace)``.

    ``addresses`` are listen addresses (``0.0.0.0:8500``, ``unix:/path``).
    ``stop(grace)`` refuses new RPCs at once and lets running ones finish for
    up to ``grace`` seconds.
    """

    def __init__(self, dataplane: DataPlane, addresses: Sequence[str], *, max_threads: int,
                 channel_arguments: Sequence[tuple[str, Any]] = (), use_tensor_content: bool = False) -> None:
        self._dataplane = dataplane
        self._addresses = list(addresses)
        self._max_threads = max(1, max_threads)
        self._options = [("grpc.max_send_message_length", MAX_MESSAGE_LENGTH),
                         ("grpc.max_receive_message_length", MAX_MESSAGE_LENGTH),
                         ("grpc.so_reuseport", 0), *channel_arguments]
        self._use_tensor_content = use_tensor_content
        self._server: Optional[grpc.Server] = None
        self.bound_ports: list[int] = []

    def start(self) -> None:
        from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

        executor = futures.ThreadPoolExecutor(max_workers=self._max_threads, thread_name_prefix="grpc")
        server = grpc.server(executor, options=self._options)
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
            _PredictionService(self._dataplane, self._use_tensor_content), server)
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(_ModelService(self._dataplane), server)
        for address in self._addresses:
            try:
                port = server.add_insecure_port(address)
            except RuntimeError as exc:   # grpcio raises when the address cannot be bound
                raise status.InvalidArgument(f"Failed to BuildAndStart gRPC server: cannot bind {address}") from exc
            if port == 0 and not address.startswith("unix:"):
                raise status.InvalidArgument(f"Failed to BuildAndStart gRPC server: cannot bind {address}")
            self.bound_ports.append(port)
            logger.info("Running gRPC ModelServer at %s ...", address)
        server.start()
        self._server = server

    def stop(self, grace: Optional[float] = None) -> None:
        """Stop accepting RPCs now; wait up to ``grace`` seconds for running ones."""
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None
