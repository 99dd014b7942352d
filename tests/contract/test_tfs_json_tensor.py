"""TF Serving's ``util/json_tensor_test.cc`` (2.17.1): its response-side cases, ported as tables against the codec.

``MakeJsonFromTensors`` is ``codec.outputs_to_rest_response``;
``MakeJsonFromClassificationResult`` / ``MakeJsonFromRegressionResult`` are
``codec.classification_result_to_rest`` / ``regression_result_to_rest``. The
expected JSON is compared as text where TF Serving's test compares values as
strings (``CompareJsonAllValuesAsStrings``: ``9e+06`` is not ``9000000.0``).
The request-side cases (``FillPredictRequestFromJson``) run against
``codec.rest_request_loads`` + ``codec.rest_request_to_inputs``, the way the
REST front-end decodes a Predict body; ``FillClassificationRequestFromJson`` /
``FillRegressionRequestFromJson`` against ``codec.rest_request_to_input``. A
TensorProto of TF Serving's test is compared as dtype, shape and values.
"""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from google.protobuf import text_format
from tensorflow_serving.apis import classification_pb2, input_pb2, regression_pb2

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


@pytest.mark.parametrize("tensors, message", [
    pytest.param({}, "Cannot convert empty tensor map to JSON", id="empty-map"),
    pytest.param({"tensor": np.array([1 + 2j], np.complex64)}, "Failed to write JSON value for tensor type: complex64",
                 id="complex64"),
    pytest.param({"tensor": np.array(1, np.int32)}, "Tensor name: tensor has no shape information", id="no-shape"),
])
def test_from_json_single_tensor_errors(tensors, message):
    """FromJsonSingleTensorErrors: the empty map, a complex64 tensor, a tensor without a shape (row format)."""
    with pytest.raises(status.InvalidArgument) as caught:
        codec.outputs_to_rest_response(tensors, True)
    assert message in caught.value.details


def _named_tensors() -> dict[str, np.ndarray]:
    return {"int_tensor": np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2], np.int32).reshape(2, 3, 2),
            "str_tensor": np.array([[b"foo", b"bar"], [b"baz", b"bat"]], dtype=object),
            "float_tensor": np.array([[1.0], [2.0]], np.float32),
            "double_scalar_tensor": np.array([8.0, 9.0], np.float64),
            "str_tensor_bytes": np.array([[b"hello", b"world"], [b"tf", b"serving"]], dtype=object)}


def test_from_json_multiple_named_tensors():
    """FromJsonMultipleNamedTensors: five outputs as rows of objects and as one object of columns."""
    rows = json.loads(codec.outputs_to_rest_response(_named_tensors(), True))
    assert rows == {"predictions": [
        {"double_scalar_tensor": 8.0, "float_tensor": [1.0], "int_tensor": [[1, 2], [3, 4], [5, 6]],
         "str_tensor": ["foo", "bar"], "str_tensor_bytes": [{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}]},
        {"double_scalar_tensor": 9.0, "float_tensor": [2.0], "int_tensor": [[7, 8], [9, 0], [1, 2]],
         "str_tensor": ["baz", "bat"], "str_tensor_bytes": [{"b64": "dGY="}, {"b64": "c2VydmluZw=="}]}]}
    columns = json.loads(codec.outputs_to_rest_response(_named_tensors(), False))
    assert columns == {"outputs": {
        "double_scalar_tensor": [8.0, 9.0], "float_tensor": [[1.0], [2.0]],
        "int_tensor": [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]],
        "str_tensor": [["foo", "bar"], ["baz", "bat"]],
        "str_tensor_bytes": [[{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}], [{"b64": "dGY="}, {"b64": "c2VydmluZw=="}]]}}


@pytest.mark.parametrize("tensors", [
    pytest.param({"int_tensor": np.arange(6, dtype=np.int32).reshape(2, 3),
                  "str_tensor": np.array([[b"foo", b"bar", b"baz"]], dtype=object)},
                 id="FromJsonMultipleNamedTensorsErrors"),
    pytest.param({"int_tensor": np.zeros((0, 2), np.int32), "str_tensor": np.array([[b"foo", b"bar"]], dtype=object)},
                 id="FromJsonMultipleZeroBatchTensorsErrors"),
])
def test_inconsistent_batch_size(tensors):
    """FromJsonMultipleNamedTensorsErrors, FromJsonMultipleZeroBatchTensorsErrors: outputs of different batch
    sizes have no row format."""
    with pytest.raises(status.InvalidArgument) as caught:
        codec.outputs_to_rest_response(tensors, True)
    assert "Tensor name: str_tensor has inconsistent batch size: 1 expecting: " in caught.value.details


@pytest.mark.parametrize("tensors", [
    pytest.param({"int_tensor": np.zeros((0, 2), np.int32)}, id="FromJsonSingleZeroBatchTensor"),
    pytest.param({"str_tensor": np.zeros((0, 1, 2), dtype=object), "float_tensor": np.zeros((0, 3, 4), np.float32)},
                 id="FromJsonMultipleZeroBatchTensors"),
])
def test_zero_batch_tensors(tensors):
    """FromJsonSingleZeroBatchTensor, FromJsonMultipleZeroBatchTensors: a batch of 0 is {"predictions": []}."""
    assert json.loads(codec.outputs_to_rest_response(tensors, True)) == {"predictions": []}


def decode(body: bytes | str, specs: dict) -> tuple[dict[str, np.ndarray], bool]:
    """``FillPredictRequestFromJson``: a Predict body decoded as the REST front-end decodes it."""
    data = body.encode() if isinstance(body, str) else body
    return codec.rest_request_to_inputs(codec.rest_request_loads(data), specs)


def assert_tensor(actual: np.ndarray, dtype, shape: tuple, values: list) -> None:
    """TF Serving's ``EqualsProto`` on a TensorProto: dtype, shape and every value (NaN equal to NaN)."""
    assert actual.dtype == np.dtype(dtype)
    assert actual.shape == shape
    expected = np.array(values, dtype=dtype).reshape(shape)
    if actual.dtype.kind == "f":
        np.testing.assert_array_equal(actual, expected)  # NaN == NaN here
        assert np.signbit(actual).tolist() == np.signbit(expected).tolist()  # -0.0 is not 0.0
    else:
        assert actual.tolist() == expected.tolist()


@pytest.mark.parametrize("body, dtype, row_format, shape, values", [
    pytest.param('{"instances": [[1,2],[3,4],[5,6]]}', np.int32, True, (3, 2), [1, 2, 3, 4, 5, 6],
                 id="SingleUnnamedTensor"),
    pytest.param('{"instances": [1, 2.0, 3, 4, 5.003, 0.007, 0.0]}', np.float32, True, (7,),
                 [1, 2.0, 3, 4, 5.003, 0.007, 0.0], id="MixedInputForFloatTensor"),
    pytest.param('{"instances": [1.0, 2, 3, 4, 0.662, 0, 0.0]}', np.float64, True, (7,),
                 [1.0, 2, 3, 4, 0.662, 0, 0.0], id="MixedInputForDoubleTensor"),
    pytest.param('{"instances": [1435774380]}', np.float32, True, (1,), [1435774380],
                 id="FloatTensorWithPrecisionLoss-int"),
    pytest.param('{"instances": [1435774380.0]}', np.float32, True, (1,), [1435774380.0],
                 id="FloatTensorWithPrecisionLoss-decimal"),
    pytest.param('{"instances": [%r]}' % sys.float_info.max, np.float32, True, (1,), [np.inf],
                 id="FloatTensorThatExceedsMaxReturnsInf-max"),
    pytest.param('{"instances": [%r]}' % -sys.float_info.max, np.float32, True, (1,), [-np.inf],
                 id="FloatTensorThatExceedsMaxReturnsInf-lowest"),
    pytest.param('{"instances": [%r]}' % sys.float_info.min, np.float32, True, (1,), [0.0],
                 id="FloatTensorThatExceedsMinReturnsZero-min"),
    pytest.param('{"instances": [%r]}' % -sys.float_info.min, np.float32, True, (1,), [-0.0],
                 id="FloatTensorThatExceedsMinReturnsZero-negative"),
    pytest.param('{"signature_name": "predict_images", "instances": [[1,2]]}', np.int32, True, (1, 2), [1, 2],
                 id="SingleUnnamedTensorWithSignature"),
    pytest.param(b'{"instances": [[1,2],[3,4],[5,6]]}X'[:-1], np.int32, True, (3, 2), [1, 2, 3, 4, 5, 6],
                 id="TensorFromNonNullTerminatedBuffer"),
    pytest.param('{"instances": [ { "b64" : "aGVsbG8=" }, { "b64": "d29ybGQ=" } ]}', object, True, (2,),
                 [b"hello", b"world"], id="SingleUnnamedTensorBase64Scalars"),
    pytest.param('{"instances": [ [{ "b64" : "aGVsbG8=" }], [{ "b64": "d29ybGQ=" }] ]}', object, True, (2, 1),
                 [b"hello", b"world"], id="SingleUnnamedTensorBase64Lists"),
    pytest.param('{"instances": [{"default": [ [{ "b64" : "aGVsbG8=" }], [{ "b64": "d29ybGQ=" }] ]}]}', object, True,
                 (1, 2, 1), [b"hello", b"world"], id="SingleNamedTensorBase64"),
    pytest.param('{"inputs": {"default": [[[1,2],[3,4],[5,6]]]}}', np.int32, False, (1, 3, 2), [1, 2, 3, 4, 5, 6],
                 id="SingleUnnamedTensorColumnarFormat-named"),
    pytest.param('{"inputs": [[[1,2],[3,4],[5,6]]]}', np.int32, False, (1, 3, 2), [1, 2, 3, 4, 5, 6],
                 id="SingleUnnamedTensorColumnarFormat-unnamed"),
])
def test_fill_predict_request_single_tensor(body, dtype, row_format, shape, values):
    """SingleUnnamedTensor, MixedInputForFloatTensor, MixedInputForDoubleTensor, FloatTensorWithPrecisionLoss,
    FloatTensorThatExceedsMaxReturnsInf, FloatTensorThatExceedsMinReturnsZero, SingleUnnamedTensorWithSignature,
    TensorFromNonNullTerminatedBuffer, SingleUnnamedTensorBase64Scalars, SingleUnnamedTensorBase64Lists,
    SingleNamedTensorBase64, SingleUnnamedTensorColumnarFormat: one input named "default" (the parameter id names
    the TF Serving test). A JSON number reaches a float tensor as rapidjson's ``GetFloat`` casts it: beyond
    float's range it is +-inf, below it +-0, an integer float cannot hold exactly is rounded."""
    inputs, row = decode(body, {"default": dtype})
    assert row is row_format
    assert list(inputs) == ["default"]
    assert_tensor(inputs["default"], dtype, shape, values)


def test_multiple_named_tensor():
    """MultipleNamedTensor: four inputs of four types in row format, NaN and Infinity read as numbers."""
    inputs, row = decode("""{"instances": [
        {"int_tensor": [[1,2],[3,4],[5,6]], "str_tensor": ["foo", "bar"], "float_tensor": [1.0, NaN],
         "dbl_tensor": [NaN]},
        {"int_tensor": [[7,8],[9,0],[1,2]], "str_tensor": ["baz", "bat"], "float_tensor": [2.0, Infinity],
         "dbl_tensor": [2.0]}]}""",
                         {"int_tensor": np.int32, "str_tensor": object, "float_tensor": np.float32,
                          "dbl_tensor": np.float64})
    assert row is True and len(inputs) == 4
    assert_tensor(inputs["int_tensor"], np.int32, (2, 3, 2), [1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2])
    assert_tensor(inputs["str_tensor"], object, (2, 2), [b"foo", b"bar", b"baz", b"bat"])
    assert_tensor(inputs["float_tensor"], np.float32, (2, 2), [1.0, np.nan, 2.0, np.inf])
    assert_tensor(inputs["dbl_tensor"], np.float64, (2, 1), [np.nan, 2.0])


def test_multiple_named_tensor_columnar_format():
    """MultipleNamedTensorColumnarFormat: an int tensor, a string list and one base64 scalar (shape [])."""
    inputs, row = decode("""{"inputs": {"int_tensor": [[[1,2],[3,4],[5,6]]], "str_tensor": ["foo", "bar"],
                                        "bin_tensor": { "b64" : "aGVsbG8=" }}}""",
                         {"int_tensor": np.int32, "str_tensor": object, "bin_tensor": object})
    assert row is False and len(inputs) == 3
    assert_tensor(inputs["int_tensor"], np.int32, (1, 3, 2), [1, 2, 3, 4, 5, 6])
    assert_tensor(inputs["str_tensor"], object, (2,), [b"foo", b"bar"])
    assert_tensor(inputs["bin_tensor"], object, (), [b"hello"])


@pytest.mark.parametrize("body, message", [
    pytest.param("", "JSON Parse error: The document is empty", id="empty"),
    pytest.param('{"signature_name": 5, "instances": [[1,2],[3,4],[5,6,7]]}',
                 "not formatted correctly. 'signature_name' key must be a string value.", id="signature_name"),
    pytest.param('{"instances": [[1,2],[3,4],[5,6,7]], "inputs": [[1,2],[3,4],[5,6,7]]}',
                 "Not formatted correctly expecting only one of 'inputs' or 'instances' keys to exist",
                 id="both-keys"),
    pytest.param('{"instances": [[1,2],[3,4],[5,6,7]]}',
                 "Failed to process element: 2 of 'instances' list. Error: INVALID_ARGUMENT: "
                 "Expecting tensor size: 2 but got: 3", id="tensor-size"),
    pytest.param('{"instances": [[1,2],[3,4],[[5,6]]]}',
                 "Failed to process element: 2 of 'instances' list. Error: INVALID_ARGUMENT: "
                 "Expecting shape [2] but got: [1,2]", id="shape"),
    pytest.param('{"instances": [1, [1]]}', "Expecting shape", id="scalar-then-list"),
    pytest.param('{"instances": [[1,2],["a", "b"]]}',
                 'JSON Value: "a" Type: String is not of expected type: int32', id="type"),
    pytest.param('{"instances": 1}', "JSON Value: {\"instances\":1} Expecting 'instances' to be an list/array",
                 id="not-a-list"),
])
def test_single_unnamed_tensor_errors(body, message):
    """SingleUnnamedTensorErrors: each case INVALID_ARGUMENT with TF Serving's text (the test's substring, here
    the whole message where json_tensor.cc spells it out; "an list/array" is TF Serving's spelling)."""
    with pytest.raises(status.InvalidArgument) as caught:
        decode(body, {"default": np.int32})
    assert message in caught.value.details


_INT_STR = {"int_tensor": np.int32, "str_tensor": object}


@pytest.mark.parametrize("body, specs, message", [
    pytest.param("""{"instances": [
        {"int_tensor": [[1,2],[3,4],[5,6]], "str_tensor": ["foo", "bar"]},
        {"int_tensor": [[[7,8],[9,0],[1,2]]], "str_tensor": ["baz", "bat"]}]}""", _INT_STR,
                 "Failed to process element: 1 key: int_tensor of 'instances' list. Error: INVALID_ARGUMENT: "
                 "Expecting shape [3,2] but got: [1,3,2]", id="shape"),
    pytest.param("""{"instances": [
        {"int_tensor": [[1,2],[3,4],[5,6],[7,8]], "str_tensor": ["foo", "bar"]},
        {"int_tensor": [[7,8],[9,0],[1,2]], "str_tensor": ["baz", "bat"]}]}""", _INT_STR,
                 "Failed to process element: 1 key: int_tensor of 'instances' list. Error: INVALID_ARGUMENT: "
                 "Expecting tensor size: 8 but got: 6", id="size"),
    pytest.param("""{"instances": [
        {"int_tensor": [[1,2],[3,4],[5,6]], "str_tensor": ["foo", "bar"]},
        [1, 20, 30],
        {"int_tensor": [[[7,8],[9,0],[1,2]]], "str_tensor": ["baz", "bat"]}]}""", _INT_STR,
                 "Expecting object but got list at item 1 of input list", id="object-then-list"),
    pytest.param('{"instances": [["baz", "bar"], {"str_tensor": ["baz", "bat"]}]}', {"str_tensor": object},
                 "Expecting value/list but got object at item 1 of input list", id="list-then-object"),
])
def test_multiple_named_tensor_errors(body, specs, message):
    """MultipleNamedTensorErrors: shapes and sizes across instances, objects mixed with lists."""
    with pytest.raises(status.InvalidArgument) as caught:
        decode(body, specs)
    assert message in caught.value.details


def _examples_request(body: str) -> input_pb2.Input:
    return codec.rest_request_to_input(codec.json_loads(body.encode()), input_pb2.Input())


def _input(text: str) -> input_pb2.Input:
    return text_format.Parse(text, input_pb2.Input())


def test_classify_regress_request_no_context():
    """ClassifyRegressRequestTest.RequestNoContext (Classify and Regress decode the same "examples")."""
    actual = _examples_request("""{"examples": [
        {"names": [ "foo", "bar" ], "ratings": [ 8.0, 9.0 ], "age": 20},
        {"names": [ "baz" ], "ratings": 6.0}]}""")
    assert actual == _input("""example_list {
        examples { features {
          feature { key: "names" value { bytes_list { value: "foo" value: "bar" } } }
          feature { key: "ratings" value { float_list { value: 8.0 value: 9.0 } } }
          feature { key: "age" value { int64_list { value: 20 } } } } }
        examples { features {
          feature { key: "names" value { bytes_list { value: "baz" } } }
          feature { key: "ratings" value { float_list { value: 6.0 } } } } } }""")


def test_classify_regress_request_with_context_and_signature():
    """ClassifyRegressRequestTest.RequestWithContextAndSignature: context, NaN/Infinity floats, base64 bytes,
    true/false in an int64 feature as 1/0."""
    actual = _examples_request("""{"signature_name": "custom_signture",
        "context": {"query": "pizza", "location": [ "sfo" ]},
        "examples": [
          {"names": [ "foo", "bar" ], "ratings": [ 8.0, 9.0, NaN, Infinity ], "age": 20},
          {"names": [ "baz", { "b64": "aGVsbG8=" } ], "ratings": 6.0, "intboolmix": [ 1, true, false ]},
          {"names": "bar", "ratings": -Infinity}]}""")
    expected = _input("""example_list_with_context {
        context { features {
          feature { key: "query" value { bytes_list { value: "pizza" } } }
          feature { key: "location" value { bytes_list { value: "sfo" } } } } }
        examples { features {
          feature { key: "names" value { bytes_list { value: "foo" value: "bar" } } }
          feature { key: "ratings" value { float_list { value: 8.0 value: 9.0 value: NaN value: Infinity } } }
          feature { key: "age" value { int64_list { value: 20 } } } } }
        examples { features {
          feature { key: "names" value { bytes_list { value: "baz" value: "hello" } } }
          feature { key: "ratings" value { float_list { value: 6.0 } } }
          feature { key: "intboolmix" value { int64_list { value: 1 value: 1 value: 0 } } } } }
        examples { features {
          feature { key: "names" value { bytes_list { value: "bar" } } }
          feature { key: "ratings" value { float_list { value: -Infinity } } } } } }""")
    # NaN != NaN in proto equality (TF Serving's test sets treat_nan_as_equal): compare the text.
    assert text_format.MessageToString(actual) == text_format.MessageToString(expected)


@pytest.mark.parametrize("body, message", [
    pytest.param('{"signature_name": [ "hello" ], "examples": [ { "names": [ "foo", "bar" ] } ]}',
                 "'signature_name' key must be a string", id="signature_name"),
    pytest.param('{"context": [ { "names": [ "foo", "bar" ] } ]}', "Example must be JSON object but got JSON Array",
                 id="context-list"),
    pytest.param('{"examples": { "names": [ "foo", "bar" ] }}', "Expecting 'examples' value to be an list/array",
                 id="examples-object"),
    pytest.param('{"examples": [ [ { "names": [ "foo", "bar" ] } ] ]}',
                 "Example must be JSON object but got JSON Array", id="example-list"),
    pytest.param('{"examples": [ { "names": [ 10, null ] } ]}',
                 "Feature: names has element with unexpected JSON type: Null", id="null"),
    pytest.param('{"examples": [ { "names": [ 10, 10.0 ] } ]}',
                 "Unexpected element type in feature: names expecting type: int64", id="int-then-float"),
    pytest.param('{"examples": [ { "names": [ 10, { "test": 10 } ] } ]}',
                 "Feature: names has element with unexpected JSON type: Object", id="object"),
    pytest.param('{"examples": [ { "names": [ [10], 20 ] } ]}',
                 "Feature: names has element with unexpected JSON type: Array", id="array"),
    pytest.param('{"examples": [ { "names": [ 20, 18446744073709551603 ] } ]}',
                 "Feature: names has uint64_t element. Only int64_t is supported.", id="uint64"),
])
def test_classify_regress_request_json_errors(body, message):
    """ClassifyRegressRequestTest.JsonErrors: INVALID_ARGUMENT with TF Serving's text."""
    with pytest.raises(status.InvalidArgument) as caught:
        _examples_request(body)
    assert message in caught.value.details


@pytest.mark.parametrize("message", ['Bad key: "key"', "Bad key: 'key'"])
def test_make_json_from_status_error(message):
    """MakeJsonFromTensors.StatusError: {"error": message}, quotes escaped so the body parses back to the text."""
    from serving.server.frontends.rest_handlers import error_json

    assert json.loads(error_json(message)) == {"error": message}
