"""gRPC front-end: TF Serving's ``PredictionService`` and ``ModelService`` on the official stubs.

Each handler decodes the request, makes one ``DataPlane`` call and encodes
the plain answer into TF Serving's response message. Errors leave through one
place (``_rpc``): the canonical code is copied numerically into the gRPC
status and the message truncated as ``model_servers/grpc_status_util.cc``
does; anything that is not a ``ServingError`` becomes INTERNAL naming the
method and a request id (``status.internal_error``), the Python exception
going to the log only. The server accepts messages up to int32 max both ways
(``server.cc`` ``SetMaxMessageSize``) and honours the client's deadline (none,
or one beyond ``deadline.MAX_DEADLINE_SECONDS``, is none).

Admission: ``max_concurrent_rpcs`` bounds the calls being handled or waiting
for one of the ``max_threads`` threads (grpc's ``maximum_concurrent_rpcs``);
past it a call is refused at once with RESOURCE_EXHAUSTED ("Concurrent RPC
limit exceeded!") instead of queueing without bound. ``max_tensor_elements``
bounds the elements of one request's input tensors together, charged from
their shapes before any array is allocated (``codec.ElementBudget``).
Without the bound, open-loop overload piled up thousands of calls in the
server and gRPC core began dropping newly arrived ones before grpc Python had
taken them: clients saw CANCELLED within a millisecond. With it, CPU overload
still left calls waiting in core for grpc Python to take them, and core drops
those past its pending-queue cap with CANCELLED; ``grpc_limits`` raises the cap.

Drain (``stop(grace)``): gRPC core cancels, with CANCELLED, every call that
has reached the server but that grpc Python has not yet taken when the server
shuts down, and every call that reaches it after the shutdown began and before
the client has read the GOAWAY (``server.cc``: ``ZombifyPending`` and
``StartNewRpc`` kill the call as a zombie; ``filter_stack_call.cc``
``ExternalUnref`` ends a call whose handler never ran with CANCELLED;
grpc/grpc#41785, its fix grpc/grpc#41786 unmerged). grpc Python takes calls
one at a time, so a burst that arrived just before SIGTERM came back
CANCELLED, and so did calls clients kept sending on their open connections.
So the drain has four steps, and core's shutdown comes last:

1. the listening sockets are shut (new connections are refused at once);
2. the calls already sent on open connections are served as usual until none
   has come for ``_CATCH_UP_QUIET_SECONDS`` (at most ``_CATCH_UP_MAX_SECONDS``);
3. every call that still comes gets UNAVAILABLE at once
   (``MessageFirstExecutor.refuse_new_calls``), until none has come for
   ``_CATCH_UP_QUIET_SECONDS`` (at most ``_REFUSE_MAX_SECONDS``) and every
   admitted call has been answered (within ``grace``): core's queue of
   untaken calls empties and each client learns, with a status it may retry
   elsewhere, that this server is going away;
4. with nothing left to answer, the accepted connections are shut
   (``SHUT_RDWR``): a call still in transit on one fails at its client with
   UNAVAILABLE ("Socket closed") instead of reaching a server whose shutdown
   has begun.

Then grpc's ``stop(grace)`` sends GOAWAY to what is left and waits for it,
cancelling what runs after ``grace`` seconds (CANCELLED: a drain that ran out
of grace). Each step removes CANCELLED answers the ones before it leave
(``tests/security/test_sigterm.py``; measured: docs/operations.md).

Every listener (TCP and UNIX socket) uses the same credentials, as
``server.cc`` does: plaintext, or those ``server_credentials`` builds from an
``SSLConfig`` (``BuildServerCredentialsFromSSLConfigFile``): TLS with
``server_key``/``server_cert``, and with ``client_verify`` mutual TLS that
requires a client certificate signed by ``custom_ca``.

This module imports ``tensorflow_serving``'s messages, which load TensorFlow;
the composition root imports it only when it starts the gRPC front-end.

Messages: grpc core applies ``grpc.max_receive_message_length`` to a
message once inflated from ``grpc-encoding: gzip`` too (it refuses a bomb
with RESOURCE_EXHAUSTED "Decompressed message larger than max"), so
decompression is capped by the receive limit, ``max_receive_message_bytes``:
``--grpc_max_receive_message_bytes``, by default REST's body limit (64 MiB;
TF Serving's is the int32 max), or the per-request memory budget if less. The
same limit bounds what a Predict's tensors hold once decoded, strings and
broadcast values counted per element (a 1 MB string_val filling a shape of
4000 is 4 GB), unless the message is larger than a 32nd of it, as a REST
body bounds its JSON: checked before TensorFlow fills the broadcast. Core
inflates into many small heap blocks, which glibc keeps after a large
message is parsed (or fails to parse: grpc then answers INTERNAL "Exception
deserializing request!" itself): every method's deserializer gives the free
heap back to the OS (``malloc_trim``) after a message of
``admission.DEFAULT_RELEASE_AFTER_BYTES`` or more, and a message that does
not parse is answered INVALID_ARGUMENT, a client error, not grpc's INTERNAL.
"""
from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
from typing import Callable, Mapping, Optional, Sequence, TypeVar, Union

import grpc
import numpy as np
from google.protobuf import message
from tensorflow.core.framework import tensor_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    model_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from serving import codec, status
from serving.codec import VersionStatus
from serving.server.admission import DEFAULT_RELEASE_AFTER_BYTES, array_bytes
from serving.server.deadline import deadline_after
from serving.server.frontends.dataplane import (
    SIGNATURE_DEF_METADATA_FIELD,
    ClassificationResult,
    DataPlane,
    InferenceResult,
    InferenceTask,
    ModelSpec,
    RegressionResult,
)
from serving.server.frontends.grpc_admission import MessageFirstExecutor
from serving.server.frontends.grpc_limits import GrpcConnectionLimits
from serving.server.frontends.grpc_health import HealthService
from serving.server.memory import release_free_memory

__all__ = ["GrpcFrontend", "MAX_MESSAGE_LENGTH", "parse_channel_arguments", "server_credentials",
           "listen_address"]

logger = logging.getLogger(__name__)

MAX_MESSAGE_LENGTH = 2**31 - 1
_CATCH_UP_QUIET_SECONDS = 0.1
_CATCH_UP_MAX_SECONDS = 2.0
_REFUSE_MAX_SECONDS = 5.0
_IDLE_POLL_SECONDS = 0.01

Request = TypeVar("Request", bound=message.Message)
Response = TypeVar("Response", bound=message.Message)
Servicer = TypeVar("Servicer")
Decoded = TypeVar("Decoded")


ChannelArgument = tuple[str, Union[int, str]]


def parse_channel_arguments(text: str) -> list[ChannelArgument]:
    """``--grpc_channel_arguments``: comma-separated ``key=value``; ints passed as ints."""
    arguments: list[ChannelArgument] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, value = item.partition("=")
        try:
            arguments.append((key.strip(), int(value)))
        except ValueError:
            arguments.append((key.strip(), value.strip()))
    return arguments


def server_credentials(ssl_config: message.Message) -> grpc.ServerCredentials:
    """TLS credentials from a ``tensorflow.serving.SSLConfig``; InvalidArgument for an unusable one.

    ``client_verify`` requests and requires a client certificate and verifies it
    against ``custom_ca`` (``GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY``);
    without it no client certificate is requested. A key that is not the
    certificate's is found when the port is bound.
    """
    for name in ("server_key", "server_cert"):
        if "-----BEGIN " not in getattr(ssl_config, name):
            raise status.InvalidArgument(f"SSLConfig.{name} must hold a PEM {name.split('_')[1]} (the text itself, "
                                         f"not a file name)")
    if ssl_config.client_verify and "-----BEGIN " not in ssl_config.custom_ca:
        raise status.InvalidArgument("SSLConfig.client_verify needs custom_ca: the PEM CA certificates that "
                                     "sign client certificates")
    return grpc.ssl_server_credentials(
        [(ssl_config.server_key.encode(), ssl_config.server_cert.encode())],
        root_certificates=ssl_config.custom_ca.encode() or None,
        require_client_auth=ssl_config.client_verify)


def listen_address(host: str, port: int) -> str:
    """``host:port`` for ``add_*_port``; an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _rpc(method: Callable[[Servicer, Request, grpc.ServicerContext], Response]
         ) -> Callable[[Servicer, Request, grpc.ServicerContext], Response]:
    """Map ``ServingError`` (and anything unexpected) to a gRPC status, once."""
    @functools.wraps(method)
    def handler(self: Servicer, request: Request, context: grpc.ServicerContext) -> Response:
        try:
            return method(self, request, context)
        except status.ServingError as exc:
            context.abort(status.to_grpc_status(exc.code), status.truncate_for_grpc(exc.details))
        except Exception as exc:  # noqa: BLE001 - every failure must become a status
            error = status.internal_error(f"Internal error while handling {method.__name__}", exc, logger)
            context.abort(grpc.StatusCode.INTERNAL, error.details)
        raise AssertionError("grpc's context.abort() raises")   # never reached
    return handler


# -- decoding ---------------------------------------------------------------
def _spec(model_spec: model_pb2.ModelSpec) -> ModelSpec:
    version = model_spec.version.value if model_spec.HasField("version") else None
    return ModelSpec(model_spec.name, version, model_spec.version_label or None, model_spec.signature_name)


def _require_model_spec(request: message.Message) -> None:
    """``predict_impl.cc``, ``classification_service.cc``, ``regression_service.cc``: no ModelSpec, no call."""
    if not request.HasField("model_spec"):
        raise status.InvalidArgument("Missing ModelSpec")


def _deadline(context: grpc.ServicerContext) -> Optional[float]:
    """The client's deadline; a client that sets none gets a huge ``time_remaining()``: none."""
    return deadline_after(context.time_remaining())


def _to_arrays(tensors: Mapping[str, tensor_pb2.TensorProto], max_elements: Optional[int],
               request: Optional[message.Message] = None,
               max_receive_bytes: Optional[int] = None) -> dict[str, np.ndarray]:
    """Decode every input; InvalidArgument, before anything is allocated, if together they pass ``max_elements``,
    or, before TensorFlow fills a broadcast, if they would hold more than ``request`` may decode to
    (:func:`_max_decoded_bytes`)."""
    budget = codec.ElementBudget(max_elements)
    for name, proto in tensors.items():
        budget.take(_checked(name, codec.tensor_proto_shape, proto))
    arrays = {name: _checked(name, codec.tensor_proto_to_ndarray, proto) for name, proto in tensors.items()}
    if request is not None and max_receive_bytes is not None:
        decoded = sum(array_bytes(array) for array in arrays.values())
        # the message's own size is only read when the receive limit alone would refuse it
        if decoded > max_receive_bytes and decoded > (allowed := _max_decoded_bytes(request, max_receive_bytes)):
            raise status.InvalidArgument(
                f"The request's input tensors would hold {decoded} bytes once decoded (strings and broadcast "
                f"values counted per element), more than the {allowed} allowed "
                "(--grpc_max_receive_message_bytes, or 32 x the message's own size if more)")
    return arrays


_DECODED_BYTES_PER_MESSAGE_BYTE = 32   # a 2-byte empty string_val entry is a 32-byte TensorFlow string


def _max_decoded_bytes(request: message.Message, max_receive_bytes: int) -> int:
    """What a request's tensors may hold once decoded: the receive limit, or 32 x its own size if more (so a
    message of many short strings, which grows as TensorFlow strings, is never refused)."""
    return max(max_receive_bytes, _DECODED_BYTES_PER_MESSAGE_BYTE * request.ByteSize())


def _checked(name: str, read: Callable[[tensor_pb2.TensorProto], Decoded], proto: tensor_pb2.TensorProto) -> Decoded:
    try:
        return read(proto)
    except ValueError as exc:
        raise status.InvalidArgument(f"Input tensor {name!r} is not a valid TensorProto: {exc}") from exc


def _tasks(request: inference_pb2.MultiInferenceRequest) -> tuple[ModelSpec, list[InferenceTask]]:
    """The servable to use (the first task's ``ModelSpec``) and every task."""
    tasks = [InferenceTask(task.model_spec.name, task.model_spec.signature_name, task.method_name)
             for task in request.tasks]
    return (_spec(request.tasks[0].model_spec) if request.tasks else ModelSpec("")), tasks


# -- encoding ---------------------------------------------------------------
def _fill_spec(model_spec: model_pb2.ModelSpec, name: str, version: Optional[int], signature_name: str = "") -> None:
    model_spec.name = name
    if version is not None:
        model_spec.version.value = version
    model_spec.signature_name = signature_name


def _fill_classifications(result: ClassificationResult, proto: classification_pb2.ClassificationResult) -> None:
    for row in result.classifications:
        classes = proto.classifications.add().classes
        for cls in row.classes:
            classes.add(label=cls.label, score=cls.score)


def _fill_regressions(result: RegressionResult, proto: regression_pb2.RegressionResult) -> None:
    for regression in result.regressions:
        proto.regressions.add(value=regression.value)


def _multi_inference_response(results: Sequence[InferenceResult]) -> inference_pb2.MultiInferenceResponse:
    response = inference_pb2.MultiInferenceResponse()
    for answer in results:
        result = response.results.add()
        _fill_spec(result.model_spec, answer.name, answer.version, answer.signature_name)
        if isinstance(answer.result, ClassificationResult):
            _fill_classifications(answer.result, result.classification_result)
        else:
            _fill_regressions(answer.result, result.regression_result)
    return response


def _model_status_response(statuses: Sequence[VersionStatus]) -> get_model_status_pb2.GetModelStatusResponse:
    response = get_model_status_pb2.GetModelStatusResponse()
    for entry in statuses:
        version_status = response.model_version_status.add(version=entry.version, state=entry.state.number)
        version_status.status.error_code = int(entry.error_code)
        version_status.status.error_message = entry.error_message or ""
    return response


class _PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, dataplane: DataPlane, use_tensor_content: bool, max_tensor_elements: Optional[int],
                 max_receive_message_bytes: Optional[int] = None) -> None:
        self._dp = dataplane
        self._use_tensor_content = use_tensor_content
        self._max_tensor_elements = max_tensor_elements
        self._max_receive_message_bytes = max_receive_message_bytes

    @_rpc
    def Predict(self, request: predict_pb2.PredictRequest, context: grpc.ServicerContext
                ) -> predict_pb2.PredictResponse:
        with self._dp.track(request.model_spec.name, "Predict", "GRPC"):
            _require_model_spec(request)
            inputs = _to_arrays(request.inputs, self._max_tensor_elements, request, self._max_receive_message_bytes)
            result = self._dp.predict(_spec(request.model_spec), inputs, list(request.output_filter),
                                      deadline=_deadline(context))
        response = predict_pb2.PredictResponse()
        _fill_spec(response.model_spec, result.name, result.version, result.signature_name)
        for name, array in result.outputs.items():
            codec.ndarray_to_tensor_proto(array, response.outputs[name],
                                          use_tensor_content=self._use_tensor_content)
        return response

    @_rpc
    def Classify(self, request: classification_pb2.ClassificationRequest, context: grpc.ServicerContext
                 ) -> classification_pb2.ClassificationResponse:
        with self._dp.track(request.model_spec.name, "Classify", "GRPC"):
            _require_model_spec(request)
            answer = self._dp.classify(_spec(request.model_spec), request.input, deadline=_deadline(context))
        response = classification_pb2.ClassificationResponse()
        _fill_spec(response.model_spec, answer.name, answer.version, answer.signature_name)
        _fill_classifications(answer.result, response.result)
        return response

    @_rpc
    def Regress(self, request: regression_pb2.RegressionRequest, context: grpc.ServicerContext
                ) -> regression_pb2.RegressionResponse:
        with self._dp.track(request.model_spec.name, "Regress", "GRPC"):
            _require_model_spec(request)
            answer = self._dp.regress(_spec(request.model_spec), request.input, deadline=_deadline(context))
        response = regression_pb2.RegressionResponse()
        _fill_spec(response.model_spec, answer.name, answer.version, answer.signature_name)
        _fill_regressions(answer.result, response.result)
        return response

    @_rpc
    def MultiInference(self, request: inference_pb2.MultiInferenceRequest, context: grpc.ServicerContext
                       ) -> inference_pb2.MultiInferenceResponse:
        spec, tasks = _tasks(request)
        results = self._dp.multi_inference(spec, tasks, request.input, deadline=_deadline(context))
        return _multi_inference_response(results)

    @_rpc
    def GetModelMetadata(self, request: get_model_metadata_pb2.GetModelMetadataRequest,
                         context: grpc.ServicerContext) -> get_model_metadata_pb2.GetModelMetadataResponse:
        if not request.HasField("model_spec"):
            raise status.InvalidArgument("Missing ModelSpec")
        metadata = self._dp.model_metadata(_spec(request.model_spec), list(request.metadata_field))
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        _fill_spec(response.model_spec, metadata.model, metadata.version)
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        for key, signature_def in metadata.signature_defs.items():
            signature_map.signature_def[key].CopyFrom(signature_def)
        response.metadata[SIGNATURE_DEF_METADATA_FIELD].Pack(signature_map)
        return response


class _ModelService(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, dataplane: DataPlane) -> None:
        self._dp = dataplane

    @_rpc
    def GetModelStatus(self, request: get_model_status_pb2.GetModelStatusRequest, context: grpc.ServicerContext
                       ) -> get_model_status_pb2.GetModelStatusResponse:
        if not request.HasField("model_spec"):
            raise status.InvalidArgument("Missing ModelSpec")
        return _model_status_response(self._dp.model_status(_spec(request.model_spec)))

    def HandleReloadConfigRequest(self, request: model_management_pb2.ReloadConfigRequest,
                                  context: grpc.ServicerContext) -> model_management_pb2.ReloadConfigResponse:
        """Reload; like TF Serving, the status is both in the response and the RPC status, and each of
        ``metric_names`` is answered with one ``Metric``: its first point's increase over the reload.

        The wait for the new models ends when the call does (its deadline, or a cancel).
        """
        response = model_management_pb2.ReloadConfigResponse()
        metric_names = list(dict.fromkeys(request.metric_names))
        before = self._dp.metric_values(metric_names)
        caller_gone = threading.Event()
        if not context.add_callback(caller_gone.set):   # runs once the call terminates
            caller_gone.set()
        try:
            deadline = _deadline(context)   # None when the client set none (grpc reports a huge remainder)
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._dp.reload_config(request.config, timeout=timeout, caller_gone=caller_gone)
        except Exception as exc:  # noqa: BLE001 - every failure must become a status
            error = exc if isinstance(exc, status.ServingError) else status.internal_error(
                "Internal error while handling HandleReloadConfigRequest", exc, logger)
            logger.error("ReloadConfig failed: %s", error.details)
            response.status.error_code = int(error.code)
            response.status.error_message = error.details
            context.set_code(status.to_grpc_status(error.code))
            context.set_details(status.truncate_for_grpc(error.details))
        for name, value in self._dp.metric_values(metric_names).items():   # model_service_impl.cc
            response.metric.add(name=name, int64_value_increase=value - before[name])
        return response


class _Unparsable:
    """A request message that did not parse; its method answers INVALID_ARGUMENT instead of running."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size


def _trimming(deserialize: Callable[[bytes], message.Message]
              ) -> Callable[[bytes], Union[message.Message, _Unparsable]]:
    """``deserialize`` (``_Unparsable`` when it fails), then the free heap given back after a large message."""
    def deserialize_and_trim(raw: bytes) -> Union[message.Message, _Unparsable]:
        try:
            return deserialize(raw)
        except message.DecodeError:
            return _Unparsable(len(raw))
        finally:
            if len(raw) >= DEFAULT_RELEASE_AFTER_BYTES:
                release_free_memory()
    return deserialize_and_trim


def _refusing_unparsable(behavior: Callable[[message.Message, grpc.ServicerContext], message.Message], method: str
                         ) -> Callable[[Union[message.Message, _Unparsable], grpc.ServicerContext], message.Message]:
    def run(request: Union[message.Message, _Unparsable], context: grpc.ServicerContext) -> message.Message:
        if isinstance(request, _Unparsable):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"The request message of {request.size} bytes could not be parsed as {method}'s request")
        return behavior(request, context)
    return run


class _TrimmingHandler(grpc.GenericRpcHandler):
    """A generated service's handler whose methods' request deserializers trim after large messages, and
    whose methods answer a message that does not parse with INVALID_ARGUMENT (grpc's own answer: INTERNAL)."""

    def __init__(self, inner: grpc.GenericRpcHandler) -> None:
        self._inner = inner
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Optional[grpc.RpcMethodHandler]:
        handler = self._wrapped.get(handler_call_details.method)
        if handler is None:   # wrapped once per method this service has; unknown names are never kept
            handler = self._inner.service(handler_call_details)
            if handler is None or handler.request_deserializer is None or handler.unary_unary is None:
                return handler
            handler = handler._replace(
                request_deserializer=_trimming(handler.request_deserializer),
                unary_unary=_refusing_unparsable(handler.unary_unary, handler_call_details.method.rsplit("/", 1)[-1]))
            self._wrapped[handler_call_details.method] = handler
        return handler


class _TrimmingRegistrar:
    """What a generated ``add_*Servicer_to_server`` needs of a server; wraps its handlers in ``_TrimmingHandler``."""

    def __init__(self, server: grpc.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(tuple(_TrimmingHandler(h) for h in handlers))


def _shut_sockets(ports: Sequence[int], paths: Sequence[str], *, listening: bool) -> int:
    """``shutdown`` this process's sockets on TCP ``ports`` and UNIX ``paths``: the listening ones
    (``listening=True``: ``SHUT_RD``, new connections are refused at once, open ones keep working),
    or the accepted connections (``SHUT_RDWR``: each client sees its connection closed).

    Found through ``/proc/self/fd`` (Linux); elsewhere nothing is shut and
    grpc's own ``stop`` closes them a moment later. Returns how many were shut.
    """
    try:
        descriptors = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return 0
    shut = 0
    for descriptor in descriptors:
        try:
            duplicate = os.dup(descriptor)
        except OSError:   # already closed
            continue
        try:
            sock = socket.socket(fileno=duplicate)
        except OSError:   # not a socket
            os.close(duplicate)
            continue
        with sock:
            try:
                if bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)) != listening:
                    continue
                if sock.family not in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6):
                    continue
                address = sock.getsockname()
                ours = address in paths if sock.family == socket.AF_UNIX else address[1] in ports
                if ours:
                    sock.shutdown(socket.SHUT_RD if listening else socket.SHUT_RDWR)
                    shut += 1
            except OSError:
                continue
    return shut


class GrpcFrontend:
    """A ``grpc.server`` serving both services; ``start()`` / ``stop(grace)``.

    ``addresses`` are listen addresses (``127.0.0.1:8500``, ``unix:/path``),
    all bound with ``credentials`` (``server_credentials``; None: plaintext).
    ``max_concurrent_rpcs`` (None: unbounded) and ``max_tensor_elements``
    (None: unbounded) are the admission bounds of the module docstring.
    ``stop(grace)`` refuses new connections at once, serves the calls already
    sent, refuses later ones with UNAVAILABLE (see the module docstring), then
    lets running ones finish for up to ``grace`` seconds. ``enable_health_service``
    adds the standard ``grpc.health.v1.Health`` service (``grpc_health``).
    """

    def __init__(self, dataplane: DataPlane, addresses: Sequence[str], *, max_threads: int,
                 channel_arguments: Sequence[ChannelArgument] = (), use_tensor_content: bool = False,
                 credentials: Optional[grpc.ServerCredentials] = None,
                 max_concurrent_rpcs: Optional[int] = None, max_tensor_elements: Optional[int] = None,
                 limits: Optional[GrpcConnectionLimits] = None, max_receive_message_bytes: Optional[int] = None,
                 enable_health_service: bool = False) -> None:
        self._dataplane = dataplane
        self._enable_health_service = enable_health_service
        self._addresses = list(addresses)
        self._max_threads = max(1, max_threads)
        self._max_concurrent_rpcs = max_concurrent_rpcs
        self._max_tensor_elements = max_tensor_elements
        self._max_receive_message_bytes = max_receive_message_bytes
        self._limits = limits or GrpcConnectionLimits()
        self._options = [("grpc.max_send_message_length", MAX_MESSAGE_LENGTH),
                         ("grpc.max_receive_message_length",
                          min(MAX_MESSAGE_LENGTH, max_receive_message_bytes or MAX_MESSAGE_LENGTH)),
                         ("grpc.so_reuseport", 0), *self._limits.channel_arguments(), *channel_arguments]
        self._use_tensor_content = use_tensor_content
        self._credentials = credentials
        self._server: Optional[grpc.Server] = None
        self._executor: Optional[MessageFirstExecutor] = None
        self.bound_ports: list[int] = []

    def start(self) -> None:
        """Bind every address and serve; InvalidArgument when an address cannot be bound."""
        executor = MessageFirstExecutor(self._max_threads, max_concurrent_rpcs=self._max_concurrent_rpcs,
                                        read_timeout=self._limits.read_timeout_seconds or None)
        # Admission is the executor's (it counts calls whose message has arrived), not grpcio's.
        server = grpc.server(executor, options=self._options)
        registrar = _TrimmingRegistrar(server)
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
            _PredictionService(self._dataplane, self._use_tensor_content, self._max_tensor_elements,
                               self._max_receive_message_bytes), registrar)
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(_ModelService(self._dataplane), registrar)
        if self._enable_health_service:   # --enable_grpc_healthcheck_service
            server.add_generic_rpc_handlers((HealthService().handler(),))
        for address in self._addresses:
            port = self._bind(server, address)
            self.bound_ports.append(port)
            logger.info("Running gRPC ModelServer at %s%s ...", address, " (TLS)" if self._credentials else "")
        server.start()
        executor.start_watchdog()
        self._server, self._executor = server, executor

    def _bind(self, server: grpc.Server, address: str) -> int:
        cannot = f"Failed to BuildAndStart gRPC server: cannot bind {address}"
        if self._credentials is not None:
            cannot += " with the SSLConfig's credentials (is server_key the key of server_cert?)"
        try:
            port = (server.add_secure_port(address, self._credentials) if self._credentials
                    else server.add_insecure_port(address))
        except RuntimeError as exc:   # grpcio raises when the address cannot be bound
            raise status.InvalidArgument(cannot) from exc
        if port == 0 and not address.startswith("unix:"):
            raise status.InvalidArgument(cannot)
        return port

    def stop(self, grace: Optional[float] = None) -> None:
        """Refuse new connections now, take the calls already sent, wait up to ``grace`` seconds for them."""
        server, executor = self._server, self._executor
        if server is None or executor is None:
            return
        self._server = self._executor = None
        paths = [address[len("unix:"):] for address in self._addresses if address.startswith("unix:")]
        ports = [port for address, port in zip(self._addresses, self.bound_ports) if not address.startswith("unix:")]
        _shut_sockets(ports, paths, listening=True)
        if grace:
            end = time.monotonic() + grace
            _wait_until_quiet(executor, min(grace, _CATCH_UP_MAX_SECONDS))
            executor.refuse_new_calls()
            _wait_until_quiet(executor, min(max(0.0, end - time.monotonic()), _REFUSE_MAX_SECONDS))
            _wait_until_idle(executor, end)
            if executor.admitted == 0:   # nothing left to answer: close the connections, not GOAWAY them
                closed = _shut_sockets(ports, paths, listening=False)
                logger.info("Draining: %d gRPC call(s) sent after the drain began got UNAVAILABLE; "
                            "%d connection(s) closed", executor.refused_while_draining, closed)
            grace = max(0.0, end - time.monotonic())
        server.stop(grace).wait()
        executor.shutdown(wait=False)


def _wait_until_quiet(executor: MessageFirstExecutor, limit: float) -> None:
    """Until no call has been taken for ``_CATCH_UP_QUIET_SECONDS`` (counted from now at the
    earliest), or ``limit`` seconds have passed."""
    start = time.monotonic()
    end = start + limit
    while True:
        now = time.monotonic()
        quiet_at = max(start, executor.last_taken) + _CATCH_UP_QUIET_SECONDS
        if now >= quiet_at or now >= end:
            return
        time.sleep(min(quiet_at, end) - now)


def _wait_until_idle(executor: MessageFirstExecutor, end: float) -> None:
    """Until no admitted call is left (answered), or ``time.monotonic()`` reaches ``end``."""
    while executor.admitted and time.monotonic() < end:
        time.sleep(_IDLE_POLL_SECONDS)
