"""The REST front-end's handlers: decode a ``/v1`` request, make one ``DataPlane`` call, encode its JSON answer.

Every answer is JSON; errors are ``{"error": "..."}`` (``error_json``). Text
is checked where it enters: a JSON body with a lone surrogate or bytes that
are not UTF-8 is 400 (``codec.json_loads``). Checks run in TF Serving's
order: the JSON document first, then the model and its signature
(``DataPlane.signature``, as ``GetInfoMap`` does), then the inputs decoded
with that signature's dtypes, then the model run. Handlers run on the REST
front-end's worker threads, never on its event loop.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional, Sequence

from google.protobuf import json_format

from serving import codec, status
from serving.codec import ModelMetadata, VersionStatus
from serving.server.frontends.dataplane import SIGNATURE_DEF_METADATA_FIELD, DataPlane
from serving.server.frontends.rest_routes import ECHOED_CHARS, RestRoute

if TYPE_CHECKING:  # loads TensorFlow; only annotates
    from tensorflow_serving.apis.input_pb2 import Input

__all__ = ["RestHandlers", "Handler", "error_json"]

Handler = Callable[[RestRoute, bytes, Optional[float]], bytes]
"""A handler: the route, the (inflated) body and the deadline (``time.monotonic()``) -> the JSON answer."""


class RestHandlers:
    """One handler per ``/v1`` verb or subresource (``handler(route)``); ``max_tensor_elements`` bounds a
    predict's input elements (None: unbounded). Thread-safe: holds nothing but the data plane."""

    def __init__(self, dataplane: DataPlane, max_tensor_elements: Optional[int] = None) -> None:
        self._dp = dataplane
        self._max_tensor_elements = max_tensor_elements
        self._handlers: dict[str, Handler] = {
            "predict": self._predict, "classify": self._classify, "regress": self._regress,
            "metadata": self._metadata, "": self._model_status}

    def handler(self, route: RestRoute) -> Handler:
        """The handler of ``route``'s verb (POST) or subresource (GET)."""
        return self._handlers[route.method or route.subresource]

    def _predict(self, route: RestRoute, body: bytes, deadline: Optional[float]) -> bytes:
        document = _json_object(body, codec.rest_request_loads)
        spec = route.spec(document.get("signature_name", ""))
        signature = self._dp.signature(spec)
        inputs, row_format = codec.rest_request_to_inputs(
            document, {name: tensor.dtype for name, tensor in signature.inputs.items()},
            max_elements=self._max_tensor_elements)
        result = self._dp.predict(spec, inputs, deadline=deadline)
        return codec.outputs_to_rest_response(result.outputs, row_format)

    def _classify(self, route: RestRoute, body: bytes, deadline: Optional[float]) -> bytes:
        document = _json_object(body)
        answer = self._dp.classify(route.spec(document.get("signature_name", "")),
                                   _examples_input(document), deadline=deadline)
        return codec.classification_result_to_rest(answer.result)

    def _regress(self, route: RestRoute, body: bytes, deadline: Optional[float]) -> bytes:
        document = _json_object(body)
        answer = self._dp.regress(route.spec(document.get("signature_name", "")),
                                  _examples_input(document), deadline=deadline)
        return codec.regression_result_to_rest(answer.result)

    def _model_status(self, route: RestRoute, body: bytes, deadline: Optional[float]) -> bytes:
        if not route.model_name:
            raise status.InvalidArgument("Missing model name in request.")
        return _model_status_json(self._dp.model_status(route.spec()))

    def _metadata(self, route: RestRoute, body: bytes, deadline: Optional[float]) -> bytes:
        if not route.model_name:
            raise status.InvalidArgument("Missing model name in request.")
        return _metadata_json(self._dp.model_metadata(route.spec(), [SIGNATURE_DEF_METADATA_FIELD]))


def error_json(details: str) -> bytes:
    """``{"error": details}``; text that is not UTF-8 is written with backslash escapes, never refused."""
    try:
        return codec.json_dumps({"error": details})
    except TypeError:  # orjson refuses lone surrogates
        return codec.json_dumps({"error": details.encode("utf-8", errors="backslashreplace").decode("utf-8")})


def _json_object(body: bytes, loads: Callable[[bytes], object] = codec.json_loads) -> dict:
    """The request document, which TF Serving requires to be a JSON object."""
    if not body:
        raise status.InvalidArgument("JSON Parse error: The document is empty")
    document = loads(body)
    if not isinstance(document, dict):
        raise status.InvalidArgument(f"JSON Value: {_echoed(document)} Is not object")
    signature_name = document.get("signature_name", "")
    if not isinstance(signature_name, str):  # FillSignature's words
        raise status.InvalidArgument(
            f"JSON Value: {_echoed(document)} not formatted correctly. 'signature_name' key must be a string value.")
    return document


def _echoed(document: object) -> str:
    """The start of a request document, for an error message."""
    # Cut the text, not its UTF-8 bytes: a cut inside a character is not text.
    return codec.json_dumps(document)[:4 * ECHOED_CHARS].decode("utf-8", errors="ignore")[:ECHOED_CHARS]


def _examples_input(document: dict) -> Input:
    """A ``tensorflow.serving.Input`` from ``{"context": {...}, "examples": [...]}``."""
    from tensorflow_serving.apis import input_pb2  # loads TensorFlow: only for Classify/Regress requests

    return codec.rest_request_to_input(document, input_pb2.Input())


def _model_status_json(statuses: Sequence[VersionStatus]) -> bytes:
    """``GetModelStatusResponse`` in proto JSON, as TF Serving's REST API writes it (int64 as text)."""
    return codec.json_dumps({"model_version_status": [
        {"version": str(entry.version), "state": entry.state.name,
         "status": {"error_code": entry.error_code.name, "error_message": entry.error_message or ""}}
        for entry in statuses]})


def _metadata_json(metadata: ModelMetadata) -> bytes:
    """``GetModelMetadataResponse`` in proto JSON with its ``SignatureDefMap`` unpacked (keys sorted)."""
    signature_defs = {key: json_format.MessageToDict(metadata.signature_defs[key],
                                                     including_default_value_fields=True,
                                                     preserving_proto_field_name=True)
                      for key in sorted(metadata.signature_defs)}
    return codec.json_dumps({
        "model_spec": {"name": metadata.model, "version": str(metadata.version), "signature_name": ""},
        "metadata": {SIGNATURE_DEF_METADATA_FIELD: {"signature_def": signature_defs}}})
