"""TF Serving's ``util/json_tensor_test.cc`` (2.17.1): its response-side cases, ported as tables against the codec.

``MakeJsonFromTensors`` is ``codec.outputs_to_rest_response``;
``MakeJsonFromClassificationResult`` / ``MakeJsonFromRegressionResult`` are
``codec.classification_result_to_rest`` / ``regression_result_to_rest``. The
expected JSON is compared as text where TF Serving's test compares values as
strings (``CompareJsonAllValuesAsStrings``: ``9e+06`` is not ``9000000.0``).
The request-side cases are listed in NOT_APPLICABLE.md (not yet ported).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from tensorflow_serving.apis import classification_pb2, regression_pb2

from serving import codec, status


def compact(text: str) -> bytes:
    """TF Serving's expected JSON without its whitespace (NaN/Infinity kept as tokens)."""
    return "".join(text.split()).encode()


@pytest.mark.parametrize("row_format, key", [(True, "predictions"), (False, "outputs")])
def test_from_json_single_tensor(row_format, key):
    """FromJsonSingleTensor: an int32 [2,3,2] tensor, row and columnar."""
    tensor = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2], np.int32).reshape(2, 3, 2)
    body = codec.outputs_to_rest_response({"int_tensor": tensor}, row_format)
    assert json.loads(body) == {key: [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]]}


@pytest.mark.parametrize("row_format, key", [(True, "predictions"), (False, "outputs")])
def test_from_json_single_scalar_tensor(row_format, key):
    """FromJsonSingleScalarTensor: an int32 [5] tensor."""
    body = codec.outputs_to_rest_response({"int_tensor": np.arange(1, 6, dtype=np.int32)}, row_format)
    assert json.loads(body) == {key: [1, 2, 3, 4, 5]}


def test_from_json_single_bytes_tensor():
    """FromJsonSingleBytesTensor: a string output named *_bytes is written {"b64": ...}."""
    tensor = np.array([[b"hello", b"world"], [b"tf", b"serving"]], dtype=object)
    body = codec.outputs_to_rest_response({"str_tensor_bytes": tensor}, True)
    assert json.loads(body) == {"predictions": [[{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}],
                                                [{"b64": "dGY="}, {"b64": "c2VydmluZw=="}]]}


def test_from_json_single_float_tensor_six_digit_precision():
    """FromJsonSingleFloatTensorSixDigitPrecision: WriteDecimal's six digits (9e+06, 3e-05), ".0" on whole
    numbers, max_digits10 where six digits do not read back (555557.5)."""
    tensor = np.array([9000000, 999999, 0.50000, .0003, .00003, 555557.5], np.float32).reshape(2, 3)
    assert codec.outputs_to_rest_response({"float_tensor": tensor}, True) == compact(
        '{"predictions": [[9e+06, 999999.0, 0.5], [0.0003, 3e-05, 555557.5]]}')


def test_from_json_single_float_tensor_non_finite():
    """FromJsonSingleFloatTensorNonFinite: NaN, Infinity, 3.0, -Infinity."""
    tensor = np.array([np.nan, np.inf, 3, -np.inf], np.float32).reshape(2, 2)
    assert codec.outputs_to_rest_response({"float_tensor": tensor}, True) == compact(
        '{"predictions": [[NaN, Infinity], [3.0, -Infinity]]}')


def test_json_from_classification_result():
    """JsonFromClassificationResult: labels and float scores (0.2, not 0.200000003)."""
    result = classification_pb2.ClassificationResult()
    for row in ([("car", 0.2), ("bike", 0.7), ("bus", 0.1)], [("car", 0.7), ("bike", 0.1), ("bus", 0.2)]):
        classes = result.classifications.add().classes
        for label, score in row:
            classes.add(label=label, score=score)
    assert codec.classification_result_to_rest(result) == compact(
        '{"results": [[["car", 0.2], ["bike", 0.7], ["bus", 0.1]], [["car", 0.7], ["bike", 0.1], ["bus", 0.2]]]}')


def test_json_from_regression_result():
    """JsonFromRegressionResult: 0.2, 0.9, 1.0."""
    result = regression_pb2.RegressionResult()
    for value in (0.2, 0.9, 1.0):
        result.regressions.add(value=value)
    assert codec.regression_result_to_rest(result) == compact('{"results": [0.2, 0.9, 1.0]}')


def test_json_from_regression_result_with_non_finite():
    """JsonFromRegressionResultWithNonFinite."""
    result = regression_pb2.RegressionResult()
    for value in (0.2, float("inf"), 1.0, float("-inf"), float("nan")):
        result.regressions.add(value=value)
    assert codec.regression_result_to_rest(result) == compact(
        '{"results": [0.2, Infinity, 1.0, -Infinity, NaN]}')


def test_json_from_result_errors():
    """JsonFromResultErrors: empty results are INVALID_ARGUMENT."""
    with pytest.raises(status.InvalidArgument, match="empty ClassificationResults"):
        codec.classification_result_to_rest(classification_pb2.ClassificationResult())
    with pytest.raises(status.InvalidArgument, match="empty RegressionResults"):
        codec.regression_result_to_rest(regression_pb2.RegressionResult())


@pytest.mark.parametrize("tensors, message", [({}, "Cannot convert empty tensor map to JSON")])
def test_from_json_errors_empty_map(tensors, message):
    """FromJsonSingleTensorErrors (the empty map)."""
    with pytest.raises(status.InvalidArgument, match=message):
        codec.outputs_to_rest_response(tensors, True)


@pytest.mark.parametrize("body, message", [
    (b'{"instances": 1}', "Expecting 'instances' to be an list/array"),
])
def test_single_unnamed_tensor_errors(body, message):
    """SingleUnnamedTensorErrors: TF Serving's spelling of the message ("an list/array")."""
    with pytest.raises(status.InvalidArgument, match=message):
        codec.rest_request_to_inputs(codec.rest_request_loads(body), {"x": np.float32})
