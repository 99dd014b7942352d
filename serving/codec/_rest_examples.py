"""Classify and Regress over REST: ``examples``/``context`` in, ``results`` out.

Server side: ``rest_request_to_input`` and ``classification_result_to_rest`` /
``regression_result_to_rest``; client side: ``examples_to_rest_request`` and
``rest_response_to_results``. Results are the same Python values the gRPC
client returns (``classification_result_to_list``, ``regression_result_to_array``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Literal, Optional, Sequence, Union, overload

import numpy as np

from serving import status
from serving.codec._example import Features, example_from_dict
from serving.codec._decimal import decimal_fragment
from serving.codec._json import JSON, json_dumps, json_loads, json_value_string
from serving.codec._json_tensor import array_to_json

if TYPE_CHECKING:
    # The wire messages stand for both schemas: TF Serving's official ones have the same fields.
    from serving.wire.serving_apis_pb2 import ClassificationResult, Input, RegressionResult

__all__ = [
    "rest_request_to_input",
    "examples_to_rest_request",
    "classification_result_to_rest",
    "regression_result_to_rest",
    "classification_result_to_list",
    "regression_result_to_array",
    "rest_response_to_results",
]

Classifications = list[list[tuple[str, float]]]


def rest_request_to_input(request: JSON, input_proto: Input) -> Input:
    """Fill a ``tensorflow.serving.Input``-shaped message from a parsed Classify/Regress body.

    With ``context`` the examples go to ``example_list_with_context``, else
    to ``example_list``. Raises ``status.InvalidArgument`` in TF Serving's words.
    """
    if not isinstance(request, dict):
        raise status.InvalidArgument(f"JSON Value: {json_value_string(request)} Is not object")
    if not isinstance(request.get("signature_name", ""), str):  # FillSignature
        raise status.InvalidArgument(
            f"JSON Value: {json_value_string(request)} not formatted correctly. "
            "'signature_name' key must be a string value.")
    context = request.get("context")
    target = input_proto.example_list
    if context is not None:
        target = input_proto.example_list_with_context
        example_from_dict(context, target.context)
    examples = request.get("examples")
    if examples is None:
        raise status.InvalidArgument(
            f"JSON Value: {json_value_string(request)} When method is classify, key 'examples' "
            "is expected and was not found")
    if not isinstance(examples, list):
        raise status.InvalidArgument(
            f"JSON Value: {json_value_string(request)} Expecting 'examples' value to be an list/array")
    if not examples:
        raise status.InvalidArgument(
            f"JSON Value: {json_value_string(request)} 'examples' value is an empty array")
    for features in examples:
        example_from_dict(features, target.examples.add())
    return input_proto


def _features_json(features: Features) -> dict[str, object]:   # values for json_dumps
    out: dict[str, object] = {}
    for name, given in features.items():
        value = [given] if isinstance(given, (bytes, str)) or np.ndim(given) == 0 else given
        out[name] = array_to_json(np.asarray(value, dtype=object)) if _has_text(value) else value
    return out


def _has_text(value: object) -> bool:
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "OSU"
    return isinstance(value, Iterable) and any(isinstance(v, (bytes, str)) for v in value)


def examples_to_rest_request(examples: Sequence[Features], *,
                             context: Optional[Features] = None,
                             signature_name: Optional[str] = None) -> bytes:
    """A Classify/Regress request body; bytes that are not UTF-8 go as ``{"b64": ...}``."""
    body: dict[str, object] = {}
    if signature_name:
        body["signature_name"] = signature_name
    if context is not None:
        body["context"] = _features_json(context)
    body["examples"] = [_features_json(features) for features in examples]
    return json_dumps(body)


def classification_result_to_list(result: ClassificationResult) -> Classifications:
    """A ClassificationResult-shaped message as ``[[(label, score), ...] per example]``."""
    return [[(c.label, float(np.float32(c.score))) for c in item.classes] for item in result.classifications]


def regression_result_to_array(result: RegressionResult) -> np.ndarray:
    """A RegressionResult-shaped message as a float32 array, one value per example."""
    return np.array([r.value for r in result.regressions], dtype=np.float32)


def classification_result_to_rest(result: ClassificationResult) -> bytes:
    """``{"results": [[["label", score], ...], ...]}`` (TF Serving's Classify body)."""
    if not len(result.classifications):
        raise status.InvalidArgument("Cannot convert empty ClassificationResults to JSON")
    rows = [[[c.label, decimal_fragment(np.float32(c.score))] for c in item.classes]
            for item in result.classifications]
    return json_dumps({"results": rows})


def regression_result_to_rest(result: RegressionResult) -> bytes:
    """``{"results": [value, ...]}`` (TF Serving's Regress body)."""
    if not len(result.regressions):
        raise status.InvalidArgument("Cannot convert empty RegressionResults to JSON")
    return json_dumps({"results": decimal_fragment(regression_result_to_array(result))})


@overload
def rest_response_to_results(body: bytes | str | JSON, *, method: Literal["classify"]) -> Classifications: ...
@overload
def rest_response_to_results(body: bytes | str | JSON, *, method: Literal["regress"]) -> np.ndarray: ...
@overload
def rest_response_to_results(body: bytes | str | JSON, *, method: str) -> Union[Classifications, np.ndarray]: ...
def rest_response_to_results(body: bytes | str | JSON, *, method: str) -> Union[Classifications, np.ndarray]:
    """The ``results`` of a Classify (``method="classify"``) or Regress body, as gRPC returns them."""
    doc = json_loads(body) if isinstance(body, (bytes, bytearray, memoryview, str)) else body
    if not isinstance(doc, dict) or "results" not in doc:
        raise status.InvalidArgument(f"response has no 'results': {json_value_string(doc)}")
    results = doc["results"]
    if method == "regress":
        return np.array(results, dtype=np.float32)
    if not isinstance(results, list):
        raise _not_classifications(results)
    return [_classes(item, results) for item in results]


def _classes(item: JSON, results: JSON) -> list[tuple[str, float]]:
    """One example's ``[["label", score], ...]`` of a Classify response's ``results``."""
    if not isinstance(item, list):
        raise _not_classifications(results)
    classes = []
    for pair in item:
        if not isinstance(pair, list) or len(pair) != 2:
            raise _not_classifications(results)
        label, score = pair
        if isinstance(score, (list, dict)):
            raise _not_classifications(results)
        classes.append((str(label), float(np.float32(score))))
    return classes


def _not_classifications(results: JSON) -> status.InvalidArgument:
    return status.InvalidArgument(
        f"response's 'results' are not [label, score] pairs per example: {json_value_string(results)}")
