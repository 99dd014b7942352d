"""REST Predict bodies: TF Serving's row/columnar JSON, both sides, with its error wording."""
from __future__ import annotations

import base64

import numpy as np
import pytest

from serving import codec, status
from tests.support.arrays import NUMERIC_DTYPES, sample

# json_tensor.cc converts JSON values to and from these; DT_HALF and DT_UINT16 are neither (see the tests below)
JSON_DTYPES = [d for d in NUMERIC_DTYPES if d not in (np.float16, np.uint16)]


def _parse(body: bytes, specs):
    return codec.rest_request_to_inputs(codec.json_loads(body), specs)


@pytest.mark.parametrize("row_format", [True, False], ids=["instances", "inputs"])
@pytest.mark.parametrize("dtype", JSON_DTYPES, ids=lambda d: np.dtype(d).name)
def test_client_body_parses_back_to_the_same_tensor(dtype, row_format):
    x = sample(dtype, (3, 2))
    body = codec.inputs_to_rest_request({"x": x}, row_format=row_format)
    inputs, is_row = _parse(body, {"x": np.dtype(dtype)})
    assert is_row is row_format
    assert inputs["x"].dtype == x.dtype
    np.testing.assert_array_equal(inputs["x"], x)


def test_strings_plain_and_b64_parse_to_bytes():
    raw = b"\xff\x00binary"
    body = {"instances": [{"text": "h\u00e9", "blob": {"b64": base64.b64encode(raw).decode()}}]}
    inputs, _ = codec.rest_request_to_inputs(body, {"text": object, "blob": object})
    assert inputs["text"].tolist() == ["h\u00e9".encode()]
    assert inputs["blob"].tolist() == [raw]


def test_non_utf8_bytes_are_sent_as_b64_and_arrive_intact():
    x = np.array([b"\xff", b"ok"], dtype=object)
    body = codec.inputs_to_rest_request({"s": x}, row_format=False)
    assert b'"b64"' in body and b'"ok"' in body
    inputs, _ = _parse(body, {"s": object})
    assert inputs["s"].tolist() == x.tolist()


def test_several_inputs_in_row_format_share_the_batch():
    body = {"instances": [{"a": [1, 2], "b": 1.5}, {"a": [3, 4], "b": 2.5}]}
    inputs, is_row = codec.rest_request_to_inputs(body, {"a": np.int64, "b": np.float32})
    assert is_row
    np.testing.assert_array_equal(inputs["a"], np.array([[1, 2], [3, 4]], np.int64))
    np.testing.assert_array_equal(inputs["b"], np.array([1.5, 2.5], np.float32))


def test_columnar_inputs_may_differ_in_batch_and_be_scalars():
    body = {"inputs": {"a": [[1], [2], [3]], "k": 5}}
    inputs, is_row = codec.rest_request_to_inputs(body, {"a": np.int32, "k": np.int32})
    assert not is_row and inputs["a"].shape == (3, 1) and inputs["k"].shape == ()


def test_nan_and_infinity_reach_the_float_tensor():
    inputs, _ = _parse(b'{"instances": [NaN, Infinity, -Infinity]}', {"x": np.float32})
    x = inputs["x"]
    assert np.isnan(x[0]) and x[1] == np.inf and x[2] == -np.inf


def test_zero_size_columnar_input_takes_the_signature_dtype():
    inputs, _ = codec.rest_request_to_inputs({"inputs": [[], []]}, {"x": np.int64})
    assert inputs["x"].shape == (2, 0) and inputs["x"].dtype == np.int64


I32 = {"x": np.int32}
TWO = {"a": np.float32, "b": object}


@pytest.mark.parametrize("request_body,specs,message", [
    ({"instances": [1], "inputs": [1]}, I32,
     "Not formatted correctly expecting only one of 'inputs' or 'instances' keys to exist"),
    ({"signature_name": "s"}, I32, "Missing 'inputs' or 'instances' key"),
    ({"instances": 1}, I32, "Expecting 'instances' to be an list/array"),
    ({"instances": []}, I32, "No values in 'instances' array"),
    ({"signature_name": 1, "inputs": [1]}, I32, "'signature_name' key must be a string value."),
    ([1, 2], I32, "Is not object"),
    ({"inputs": [1]}, {}, "Failed to get input map for signature: DEFAULT"),
    ({"instances": [[1, 2], [3]]}, I32,
     "Failed to process element: 1 of 'instances' list. Error: INVALID_ARGUMENT: Expecting tensor size: 2 but got: 1"),
    ({"instances": [[[1, 2]], [[1], [2]]]}, I32,
     "Failed to process element: 1 of 'instances' list. Error: INVALID_ARGUMENT: Expecting shape [1,2] but got: [2,1]"),
    ({"instances": [[1, 2], [[3]], ["x"]]}, I32,  # the size check comes before the shape check
     "Failed to process element: 1 of 'instances' list. Error: INVALID_ARGUMENT: Expecting tensor size: 2 but got: 1"),
    ({"instances": [{"a": [1, 2], "b": "x"}, {"a": [3], "b": "y"}]}, TWO,
     "Failed to process element: 1 key: a of 'instances' list. Error: INVALID_ARGUMENT: "
     "Expecting tensor size: 2 but got: 1"),
    ({"inputs": [[1, 2], [3]]}, I32, "Encountered list at unexpected size: 1 at level: 1 expected size: 2"),
    ({"inputs": [[1, 2], 3]}, I32, "found at incorrect level"),
    ({"inputs": [1, [2]]}, I32, "Encountered list at unexpected level: 1 expected < 1"),
    ({"inputs": [1.5]}, I32, "JSON Value: 1.5 Type: Number is not of expected type: int32"),
    ({"inputs": [2147483648]}, I32, "JSON Value: 2147483648 Type: Number is not of expected type: int32"),
    ({"inputs": [2147483648]}, {"x": np.uint8}, "JSON Value: 2147483648 Type: Number is not of expected type: uint8"),
    ({"inputs": ["1"]}, {"x": np.float32}, 'JSON Value: "1" Type: String is not of expected type: float'),
    ({"inputs": [True]}, {"x": np.float32}, "JSON Value: true Type: True is not of expected type: float"),
    ({"inputs": [1]}, {"x": np.bool_}, "JSON Value: 1 Type: Number is not of expected type: bool"),
    ({"inputs": [None]}, {"x": np.float64}, "JSON Value: null Type: Null is not of expected type: double"),
    ({"inputs": [5]}, {"x": object}, "JSON Value: 5 Type: Number is not of expected type: string"),
    ({"inputs": [{"b64": "@@"}]}, {"x": object}, "Unable to base64 decode"),
    ({"inputs": [{"b64": "eA==", "x": 1}]}, {"x": object}, "not formatted correctly for base64 data"),
    ({"inputs": [[["a"], ["b", "c"]]]}, {"x": object}, "Encountered list at unexpected size"),
    ({"instances": [1, 2]}, TWO, "instances is a plain list, but expecting list of objects"),
    ({"inputs": [1, 2]}, TWO, "inputs is a plain value/list, but expecting an object"),
    ({"instances": [{"a": 1, "b": "x"}, [1]]}, TWO, "Expecting object but got list at item 1 of input list"),
    ({"instances": [[1], {"x": [1]}]}, I32, "Expecting value/list but got object at item 1 of input list"),
    ({"instances": [{"a": 1, "b": "x", "c": 2}]}, TWO,
     "Failed to process element: 0 key: c of 'instances' list. Error: INVALID_ARGUMENT: "
     "JSON object: does not have named input: c"),
    ({"instances": [{"a": 1}]}, TWO, "Failed to process element: 0 of 'instances' list. JSON object: "
     '{"a":1} keys must be equal to: a,b'),
    ({"instances": [{"a": 1, "b": "x"}, {"a": 1.5, "b": 7}]}, TWO,
     "Failed to process element: 1 key: b of 'instances' list. Error: INVALID_ARGUMENT: JSON Value: 7"),
    ({"inputs": {"a": 1}}, TWO, "Missing named input: b in 'inputs' object."),
    ({"inputs": {"a": 1, "b": "x", "extra": 1}}, TWO, "JSON object: does not have named input: extra"),
    ({"inputs": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}, I32, "at most 32 dimensions"),
], ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None)
def test_bad_requests_are_invalid_argument_naming_the_rule(request_body, specs, message):
    with pytest.raises(status.InvalidArgument) as info:
        codec.rest_request_to_inputs(request_body, specs)
    assert message in info.value.details


def test_predictions_for_one_output_omit_its_name():
    body = codec.outputs_to_rest_response({"probabilities": np.array([[0.25, 0.75]], np.float32)}, True)
    assert body == b'{"predictions":[[0.25,0.75]]}'


def test_predictions_for_several_outputs_are_objects_per_row():
    body = codec.outputs_to_rest_response(
        {"scores": np.array([0.5, np.nan], np.float32), "label_bytes": np.array([b"\x01", b"b"], dtype=object),
         "name": np.array([b"one", b"two"], dtype=object)}, True)
    assert body == (b'{"predictions":[{"scores":0.5,"label_bytes":{"b64":"AQ=="},"name":"one"},'
                    b'{"scores":NaN,"label_bytes":{"b64":"Yg=="},"name":"two"}]}')


def test_outputs_columnar_one_bare_or_an_object():
    one = codec.outputs_to_rest_response({"y": np.array(3, np.int64)}, False)
    assert one == b'{"outputs":3}'
    two = codec.outputs_to_rest_response({"y": np.array([1, 2], np.int64), "z": np.array([True])}, False)
    assert two == b'{"outputs":{"y":[1,2],"z":[true]}}'


@pytest.mark.parametrize("outputs,message", [
    ({}, "Cannot convert empty tensor map to JSON"),
    ({"a": np.array(1.0)}, "Tensor name: a has no shape information"),
    ({"a": np.zeros(2), "b": np.zeros(3)}, "Tensor name: b has inconsistent batch size: 3 expecting: 2"),
    ({"a": np.ones(2, np.complex64)}, "Failed to write JSON value for tensor type: complex64"),
])
def test_row_format_response_rules(outputs, message):
    with pytest.raises(status.InvalidArgument, match=message):
        codec.outputs_to_rest_response(outputs, True)


@pytest.mark.parametrize("row_format", [True, False], ids=["predictions", "outputs"])
@pytest.mark.parametrize("dtype", JSON_DTYPES + [object], ids=lambda d: np.dtype(d).name)
def test_response_round_trips_to_the_signature_dtypes(dtype, row_format):
    y = np.array([[b"a", b"\xfe"], [b"c", b"d"]], dtype=object) if dtype is object else sample(dtype, (2, 2))
    outputs = {"y": y, "aux": np.array([1.5, np.inf], np.float32)}
    body = codec.outputs_to_rest_response(outputs, row_format)
    back = codec.rest_response_to_outputs(body, output_dtypes={"y": np.dtype(dtype), "aux": np.float32})
    for key, value in outputs.items():
        assert back[key].dtype == value.dtype
        np.testing.assert_array_equal(back[key], value)


def test_single_unnamed_response_takes_the_only_expected_name():
    body = codec.outputs_to_rest_response({"probabilities": np.ones((1, 2), np.float32)}, True)
    back = codec.rest_response_to_outputs(body, output_names=["probabilities"],
                                          output_dtypes={"probabilities": np.float32})
    assert list(back) == ["probabilities"] and back["probabilities"].dtype == np.float32
    assert list(codec.rest_response_to_outputs(body)) == ["predictions"]


@pytest.mark.parametrize("parsed", [[1, 2], 5, None], ids=["list", "number", "null"])
def test_parsed_response_that_is_not_an_object_is_invalid_argument(parsed):
    """A parsed body that is not an object is named so (it was parsed as text again: AttributeError, "empty")."""
    with pytest.raises(status.InvalidArgument, match="response is not a JSON object"):
        codec.rest_response_to_outputs(parsed)


def test_predictions_mixing_objects_and_values_is_invalid_argument():
    """Row format: every prediction is an object once the first is (a later value was AttributeError)."""
    with pytest.raises(status.InvalidArgument, match="'predictions' item 1 is not an object: 5"):
        codec.rest_response_to_outputs(b'{"predictions": [{"a": 1}, 5]}')


def test_row_format_client_body_needs_a_batch_dimension():
    with pytest.raises(status.InvalidArgument, match="batch dimension"):
        codec.inputs_to_rest_request(np.float32(1.0))
    assert codec.inputs_to_rest_request(np.float32(1.0), row_format=False) == b'{"inputs":1.0}'


def test_signature_name_is_carried():
    body = codec.inputs_to_rest_request(np.zeros(1, np.int8), signature_name="logits")
    assert codec.json_loads(body) == {"signature_name": "logits", "instances": [0]}


@pytest.mark.parametrize("values, dtype, expected", [
    ([-1, 256, 300], np.uint8, [255, 0, 44]),
    ([40000, -40000], np.int16, [-25536, 25536]),
    ([2147483647, 128], np.int8, [-1, -128]),
])
def test_narrow_ints_take_int32_values_and_wrap(values, dtype, expected):
    """json_tensor.cc AddValueToTensor: int8/int16/uint8 take any JSON int ``IsInt`` takes (int32's range) into
    ``int_val``, which the tensor then casts to its dtype: TF Serving wraps, it does not refuse."""
    inputs, _ = codec.rest_request_to_inputs({"inputs": values}, {"x": dtype})
    assert inputs["x"].dtype == dtype and inputs["x"].tolist() == expected


# TF Serving 2.17.1 tensorflow_serving/util/json_tensor.cc: AddValueToTensor has no case for DT_HALF or DT_UINT16
# (its default, lines 282-285: errors::Unimplemented("Conversion of JSON Value: ", JsonValueToString(val),
# " to type: ", DataTypeString(dtype))), reached for the first leaf in FillTensorProto's order (lines 337-375);
# FillTensorMapFromInstancesList wraps it per element (lines 496-520). json_tensor_test.cc has no half case.
@pytest.mark.parametrize("dtype,name", [(np.float16, "half"), (np.uint16, "uint16")])
@pytest.mark.parametrize("body,code,message", [
    (b'{"inputs":[[1.5,2]]}', status.Code.UNIMPLEMENTED, "Conversion of JSON Value: 1.5 to type: {}"),
    (b'{"inputs":{"x":[[1,2],[3]]}}', status.Code.UNIMPLEMENTED, "Conversion of JSON Value: 1 to type: {}"),
    (b'{"inputs":[0.1]}', status.Code.UNIMPLEMENTED, "Conversion of JSON Value: 0.1 to type: {}"),
    (b'{"inputs":[[],1]}', status.Code.INVALID_ARGUMENT,      # no leaf before these: the shape's error
     "JSON Value: 1 found at incorrect level: 2 in the JSON DOM. Expected at level: 2"),
    (b'{"inputs":[[],[1]]}', status.Code.INVALID_ARGUMENT,
     "Encountered list at unexpected size: 1 at level: 1 expected size: 0"),
    (b'{"inputs":[{"a":1}]}', status.Code.INVALID_ARGUMENT, 'JSON Value: {{"a":1}} Type: Object is not of expected type: {}'),
    (b'{"instances":[[1.5,2]]}', status.Code.INVALID_ARGUMENT,
     "Failed to process element: 0 of 'instances' list. Error: UNIMPLEMENTED: Conversion of JSON Value: 1.5 to type: {}"),
    (b'{"instances":[{"x":[1.5]}]}', status.Code.INVALID_ARGUMENT,
     ("Failed to process element: 0 key: x of 'instances' list. Error: UNIMPLEMENTED: "
      "Conversion of JSON Value: 1.5 to type: {}")),
    ((b'{"inputs":[' + b",".join([b"1.25"] * 600) + b"]}"), status.Code.UNIMPLEMENTED,   # a DenseArray body
     "Conversion of JSON Value: 1.25 to type: {}"),
])
def test_half_and_uint16_inputs_are_refused_as_tf_serving_refuses_them(dtype, name, body, code, message):
    with pytest.raises(status.ServingError) as caught:
        codec.rest_request_to_inputs(codec.rest_request_loads(body), {"x": dtype})
    assert (caught.value.code, caught.value.details) == (code, message.format(name))


@pytest.mark.parametrize("dtype", [np.float16, np.uint16])
def test_half_and_uint16_inputs_without_values_are_empty_tensors(dtype):
    """FillTensorProto never reaches AddValueToTensor without a leaf: ``[[], []]`` is a [2, 0] tensor."""
    inputs, _ = codec.rest_request_to_inputs(codec.rest_request_loads(b'{"inputs":[[],[]]}'), {"x": dtype})
    assert inputs["x"].shape == (2, 0) and inputs["x"].dtype == dtype


# json_tensor.cc AddSingleValueAndAdvance (lines 834-896): no case for DT_HALF or DT_UINT16, so its default,
# errors::InvalidArgument("Failed to write JSON value for tensor type: ", DataTypeString(tensor.dtype())),
# for the first value written; a tensor without values writes none.
@pytest.mark.parametrize("row_format", [True, False], ids=["predictions", "outputs"])
@pytest.mark.parametrize("dtype,name", [(np.float16, "half"), (np.uint16, "uint16"), (np.complex64, "complex64")])
def test_half_and_uint16_outputs_are_refused_as_tf_serving_refuses_them(dtype, name, row_format):
    outputs = {"ok": np.ones(2, np.float32), "y": np.ones(2, dtype)}
    with pytest.raises(status.InvalidArgument) as caught:
        codec.outputs_to_rest_response(outputs, row_format)
    assert caught.value.details == f"Failed to write JSON value for tensor type: {name}"
    empty = codec.outputs_to_rest_response({"y": np.ones((0, 3), dtype)}, row_format)
    assert empty == (b'{"predictions":[]}' if row_format else b'{"outputs":[]}')
