"""REST requests and answers, as TF Serving's HTTP API defines them (tf-serving.md §2)."""
from __future__ import annotations

from typing import Any, Optional, Sequence, TypeVar
from urllib.parse import quote

import numpy as np
from google.protobuf import json_format
from google.protobuf.message import Message

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
    cast_inputs,
    examples_list,
    reading_answer,
)
from serving.client._types import ModelMetadata, VersionStatus
from serving.codec import Signature
from serving.wire import serving_apis_pb2 as apis

__all__ = ["RestProtocol", "model_path", "error_from_http", "JSON_HEADERS"]

M = TypeVar("M", bound=Message)

JSON_HEADERS = {"Content-Type": "application/json"}


def model_path(ref: ModelRef) -> str:
    """``/v1/models/NAME[/versions/N | /labels/L]``."""
    path = f"/v1/models/{quote(ref.name, safe='')}"
    if ref.version is not None:
        path += f"/versions/{int(ref.version)}"
    elif ref.label is not None:
        path += f"/labels/{quote(ref.label, safe='')}"
    return path


def error_from_http(status_code: int, body: bytes) -> status.ServingError:
    """The SDK exception for a non-2xx answer: TF Serving's ``{"error": msg}`` body.

    The code is the one the HTTP status stands for (``status.from_http_status``):
    TF Serving sends nothing else, so codes that share a status (400 is
    INVALID_ARGUMENT, FAILED_PRECONDITION and OUT_OF_RANGE) read as the most common.
    The details are the server's message, followed by ``with_hint``'s where it has one.
    """
    code = status.from_http_status(status_code)
    try:
        doc = codec.json_loads(body)
        details = doc["error"] if isinstance(doc, dict) and "error" in doc else body.decode("utf-8", "replace")
    except status.InvalidArgument:
        details = body.decode("utf-8", "replace") or f"HTTP {status_code}"
    return with_hint(status.error_for(code, str(details)))


def _parse(message: M, doc: codec.JSON) -> M:
    """``doc`` into ``message``; a document of the wrong shape raises (inside ``reading_answer``)."""
    try:
        return json_format.ParseDict(doc or {}, message, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise status.Internal(f"unreadable {type(message).__name__} JSON: {exc}") from exc


class RestProtocol(Protocol):
    """Builds TF Serving REST calls; answers are 2xx bodies.

    Predict takes its inputs' dtypes from the signature (``named_inputs``,
    one metadata call per model reference); ``cast_outputs`` casts outputs to
    the signature's dtypes too, so results equal the gRPC client's.
    """

    def __init__(self, *, cast_outputs: bool = True) -> None:
        super().__init__()
        self.cast_outputs = cast_outputs

    def metadata_call(self, ref: ModelRef) -> Call:
        return Call("GET", None, path=model_path(ref) + "/metadata", idempotent=True)

    def parse_metadata(self, answer: bytes) -> ModelMetadata:
        doc: Any = codec.json_loads(answer)   # read as it comes: a wrong shape fails inside reading_answer
        spec = _parse(apis.ModelSpec(), doc.get("model_spec"))
        signature_doc = dict((doc.get("metadata") or {}).get("signature_def") or {})
        signature_doc.pop("@type", None)
        return ModelMetadata.from_wire(spec, _parse(apis.SignatureDefMap(), signature_doc))

    def predict(self, ref: ModelRef, inputs: Inputs, signature: Optional[str],
                output_filter: Optional[Sequence[str]]) -> ApiGen[dict[str, np.ndarray]]:
        sig: Optional[Signature] = yield from self.signature(ref, signature)
        body = codec.inputs_to_rest_request(cast_inputs(sig, inputs, signature), signature_name=signature,
                                            row_format=False)
        answer = yield from self.inference(ref, Call("POST", body, path=model_path(ref) + ":predict", idempotent=True))
        specs = sig.outputs if sig else {}
        dtypes = ({name: spec.dtype for name, spec in specs.items() if spec.dtype_supported}
                  if self.cast_outputs else {})
        with reading_answer("Predict"):
            outputs = codec.rest_response_to_outputs(answer, output_names=list(specs), output_dtypes=dtypes)
        if output_filter:  # TF Serving's REST API has no output filter: drop the rest here
            missing = [name for name in output_filter if name not in outputs]
            if missing:
                raise status.InvalidArgument(f"output_filter names unknown outputs: {missing}")
            outputs = {name: outputs[name] for name in output_filter}
        return outputs

    def _examples_call(self, ref: ModelRef, verb: str, examples: Examples,
                       context: Optional[codec.Features], signature: Optional[str]) -> Call:
        body = codec.examples_to_rest_request(examples_list(examples), context=context, signature_name=signature)
        return Call("POST", body, path=f"{model_path(ref)}:{verb}", idempotent=True)

    def classify(self, ref: ModelRef, examples: Examples, context: Optional[codec.Features],
                 signature: Optional[str]) -> ApiGen[list[list[tuple[str, float]]]]:
        answer = yield self._examples_call(ref, "classify", examples, context, signature)
        with reading_answer("Classify"):
            return codec.rest_response_to_results(answer, method="classify")

    def regress(self, ref: ModelRef, examples: Examples, context: Optional[codec.Features],
                signature: Optional[str]) -> ApiGen[np.ndarray]:
        answer = yield self._examples_call(ref, "regress", examples, context, signature)
        with reading_answer("Regress"):
            return codec.rest_response_to_results(answer, method="regress")

    def status(self, ref: ModelRef) -> ApiGen[list[VersionStatus]]:
        answer = yield Call("GET", None, path=model_path(ref), idempotent=True)
        with reading_answer("GetModelStatus"):
            response = _parse(apis.GetModelStatusResponse(), codec.json_loads(answer))
            return [VersionStatus.from_wire(entry) for entry in response.model_version_status]

    def reload_config(self, config: ModelServerConfigLike) -> ApiGen[None]:
        raise status.Unimplemented(
            "TF Serving's REST API has no ReloadConfig call; use GrpcClient.reload_config "
            "(ModelService/HandleReloadConfigRequest)")
        yield  # pragma: no cover  (makes this a generator like the others)
