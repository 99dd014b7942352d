"""gRPC requests and answers (TF Serving's messages, as the SDK's wire schema declares them)."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Optional, Sequence
from typing import Protocol as TypingProtocol

import grpc
import numpy as np
from google.protobuf import text_format

from serving import codec, status
from serving.client._hints import with_hint
from serving.client._protocol import (
    ApiGen,
    Call,
    Examples,
    Inputs,
    ModelRef,
    ModelServerConfigLike,
    Protocol,
    examples_list,
    reading_answer,
)
from serving.client._types import ModelMetadata, VersionStatus
from serving.wire import methods
from serving.wire import serving_apis_pb2 as apis

__all__ = ["GrpcProtocol", "RpcStatus", "model_spec", "error_from_rpc", "config_message", "DEFAULT_LABEL"]

# The label an inference or metadata call names when the caller names neither a version nor a label: TF
# Serving would answer with the latest version, which is the canary's while one is loaded. A model without
# this label is called unlabeled instead, remembered for UNLABELED_TTL_S (then asked again: a rollout may
# have added the label).
DEFAULT_LABEL = "stable"
UNLABELED_TTL_S = 60.0


def model_spec(ref: ModelRef, signature: Optional[str] = None) -> apis.ModelSpec:
    """The ``ModelSpec`` addressing ``ref``."""
    spec = apis.ModelSpec(name=ref.name, signature_name=signature or "")
    if ref.version is not None:
        spec.version.value = int(ref.version)
    elif ref.label is not None:
        spec.version_label = ref.label
    return spec


class RpcStatus(TypingProtocol):
    """What ``error_from_rpc`` reads of a failed call (``grpc.RpcError`` of a sync or aio stub)."""

    def code(self) -> grpc.StatusCode: ...

    def details(self) -> Optional[str]: ...


def error_from_rpc(exc: RpcStatus) -> status.ServingError:
    """The SDK exception for a ``grpc.RpcError`` (sync or aio): same code, server's details (and ``with_hint``'s)."""
    code = status.from_grpc_status(exc.code())
    return with_hint(status.error_for(code, exc.details() or ""))


def config_message(config: ModelServerConfigLike) -> apis.ModelServerConfig:
    """A ``ModelServerConfig`` from the wire message, any message with its bytes, or text proto."""
    if isinstance(config, apis.ModelServerConfig):
        return config
    if isinstance(config, str):
        try:
            return text_format.Parse(config, apis.ModelServerConfig())
        except text_format.ParseError as exc:
            raise status.InvalidArgument(f"invalid ModelServerConfig text proto: {exc}") from exc
    if hasattr(config, "SerializeToString"):
        return apis.ModelServerConfig.FromString(config.SerializeToString())
    raise TypeError("config must be a ModelServerConfig message or its text proto")


def _fill_input(input_proto: apis.Input, examples: Examples, context: Optional[codec.Features]) -> None:
    target = input_proto.example_list
    if context is not None:
        target = input_proto.example_list_with_context
        codec.example_from_dict(context, target.context)
    for features in examples_list(examples):
        codec.example_from_dict(features, target.examples.add())


class GrpcProtocol(Protocol):
    """Builds TF Serving gRPC calls; bodies are serialized messages."""

    def __init__(self, *, max_response_bytes: Optional[int] = None) -> None:
        super().__init__()
        self.max_response_bytes = max_response_bytes
        self._unlabeled: dict[str, float] = {}  # model -> monotonic time until which it is called unlabeled

    def addressed(self, ref: ModelRef, build: Callable[[ModelRef], Call]) -> ApiGen[bytes]:
        """Send ``build(ref)``, with :data:`DEFAULT_LABEL` when ``ref`` names neither version nor label.

        A server without that label for the model answers INVALID_ARGUMENT "Unrecognized servable
        version label: stable" (TF Serving's words): the call is sent again unlabeled, and so are the
        model's calls for :data:`UNLABELED_TTL_S`.
        """
        if ref.version is not None or ref.label is not None or self._unlabeled.get(ref.name, 0.0) > time.monotonic():
            return (yield from self.inference(ref, build(ref)))
        try:
            return (yield from self.inference(ref, build(replace(ref, label=DEFAULT_LABEL))))
        except status.InvalidArgument as exc:
            if exc.details != f"Unrecognized servable version label: {DEFAULT_LABEL}":
                raise
        self._unlabeled[ref.name] = time.monotonic() + UNLABELED_TTL_S
        return (yield from self.inference(ref, build(ref)))

    def metadata(self, ref: ModelRef) -> ApiGen[ModelMetadata]:
        answer = yield from self.addressed(ref, self.metadata_call)
        with reading_answer("GetModelMetadata"):
            meta = self.parse_metadata(answer)
        self._metadata_cache[ref] = meta
        return meta

    def metadata_call(self, ref: ModelRef) -> Call:
        request = apis.GetModelMetadataRequest(model_spec=model_spec(ref), metadata_field=["signature_def"])
        return Call(methods.GET_MODEL_METADATA, request.SerializeToString(), idempotent=True)

    def parse_metadata(self, answer: bytes) -> ModelMetadata:
        response = apis.GetModelMetadataResponse.FromString(answer)
        signature_defs = apis.SignatureDefMap()
        if "signature_def" in response.metadata:
            packed = response.metadata["signature_def"]
            if packed.type_url != methods.SIGNATURE_DEF_MAP_TYPE_URL:
                raise status.Internal(f"unexpected metadata type {packed.type_url!r}")
            signature_defs.ParseFromString(packed.value)
        return ModelMetadata.from_wire(response.model_spec, signature_defs)

    def predict(self, ref: ModelRef, inputs: Inputs, signature: Optional[str],
                output_filter: Optional[Sequence[str]]) -> ApiGen[dict[str, np.ndarray]]:
        named = yield from self.named_inputs(ref, inputs, signature)
        answer = yield from self.addressed(ref, lambda to: Call(methods.PREDICT, codec.encode_predict_request(
            to.name, named, version=to.version, version_label=to.label, signature_name=signature,
            output_filter=output_filter or ()), idempotent=True))
        with reading_answer("Predict", self.max_response_bytes):
            return codec.decode_predict_response(answer, max_bytes=self.max_response_bytes)

    def classify(self, ref: ModelRef, examples: Examples, context: Optional[codec.Features],
                 signature: Optional[str]) -> ApiGen[list[list[tuple[str, float]]]]:
        request = apis.ClassificationRequest()
        _fill_input(request.input, examples, context)

        def build(to: ModelRef) -> Call:
            request.model_spec.CopyFrom(model_spec(to, signature))
            return Call(methods.CLASSIFY, request.SerializeToString(), idempotent=True)
        answer = yield from self.addressed(ref, build)
        with reading_answer("Classify"):
            return codec.classification_result_to_list(apis.ClassificationResponse.FromString(answer).result)

    def regress(self, ref: ModelRef, examples: Examples, context: Optional[codec.Features],
                signature: Optional[str]) -> ApiGen[np.ndarray]:
        request = apis.RegressionRequest()
        _fill_input(request.input, examples, context)

        def build(to: ModelRef) -> Call:
            request.model_spec.CopyFrom(model_spec(to, signature))
            return Call(methods.REGRESS, request.SerializeToString(), idempotent=True)
        answer = yield from self.addressed(ref, build)
        with reading_answer("Regress"):
            return codec.regression_result_to_array(apis.RegressionResponse.FromString(answer).result)

    def status(self, ref: ModelRef) -> ApiGen[list[VersionStatus]]:
        request = apis.GetModelStatusRequest(model_spec=model_spec(ref))
        answer = yield Call(methods.GET_MODEL_STATUS, request.SerializeToString(), idempotent=True)
        with reading_answer("GetModelStatus"):
            response = apis.GetModelStatusResponse.FromString(answer)
            return [VersionStatus.from_wire(entry) for entry in response.model_version_status]

    def reload_config(self, config: ModelServerConfigLike) -> ApiGen[None]:
        request = apis.ReloadConfigRequest(config=config_message(config))
        answer = yield Call(methods.RELOAD_CONFIG, request.SerializeToString())  # changes state: never retried
        with reading_answer("HandleReloadConfigRequest"):
            result = apis.ReloadConfigResponse.FromString(answer).status
        if result.error_code != status.Code.OK:
            raise status.error_for(result.error_code, result.error_message)
        return None
