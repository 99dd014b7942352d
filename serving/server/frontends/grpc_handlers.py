"""The gRPC front-end's handlers: TF Serving's ``PredictionService`` and ``ModelService`` on the official stubs.

Each handler decodes the request, makes one ``DataPlane`` call and encodes
the plain answer into TF Serving's response message. Errors leave through one
place (``_rpc``): the canonical code is copied numerically into the gRPC
status and the message truncated as ``model_servers/grpc_status_util.cc``
does; anything that is not a ``ServingError`` becomes INTERNAL naming the
method and a request id (``status.internal_error``), the Python exception
going to the log only. The client's deadline is honoured (none, or one
beyond ``deadline.MAX_DEADLINE_SECONDS``, is none).

``max_tensor_elements`` bounds the elements of one request's input tensors
together, charged from their shapes before any array is allocated
(``codec.ElementBudget``). The receive limit (``max_receive_message_bytes``)
also bounds what a Predict's tensors hold once decoded, strings and
broadcast values counted per element (a 1 MB string_val filling a shape of
4000 is 4 GB), unless the message is larger than a 32nd of it, as a REST
body bounds its JSON: checked before TensorFlow fills the broadcast.

This module imports ``tensorflow_serving``'s messages, which load TensorFlow;
the composition root imports the gRPC front-end only when it starts it.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Callable, Mapping, Optional, Sequence, TypeVar

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
from serving.server.admission import array_bytes
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

__all__ = ["PredictionService", "ModelService"]

logger = logging.getLogger(__name__)

Request = TypeVar("Request", bound=message.Message)
Response = TypeVar("Response", bound=message.Message)
Servicer = TypeVar("Servicer")
Decoded = TypeVar("Decoded")


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


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    """Predict, Classify, Regress, MultiInference and GetModelMetadata: decode, one data-plane call, encode."""

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


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
    """GetModelStatus and HandleReloadConfigRequest."""

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
