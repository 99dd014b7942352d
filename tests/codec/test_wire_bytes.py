"""PredictRequest/PredictResponse bytes assembled by the codec vs the official messages."""
from __future__ import annotations

import numpy as np
import pytest
from tensorflow.core.framework import tensor_pb2
from tensorflow_serving.apis import predict_pb2

from serving import codec
from serving.codec._wire import ZERO_COPY_BYTES
from tests.support.arrays import NUMERIC_DTYPES, sample


def _official_request(tf, name, inputs, **spec):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    if spec.get("version") is not None:
        request.model_spec.version.value = spec["version"]
    if spec.get("version_label"):
        request.model_spec.version_label = spec["version_label"]
    if spec.get("signature_name"):
        request.model_spec.signature_name = spec["signature_name"]
    request.output_filter.extend(spec.get("output_filter", ()))
    for key, value in inputs.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    return request


@pytest.mark.parametrize("spec", [
    {},
    {"version": 3, "signature_name": "serving_default", "output_filter": ["probabilities", "logits"]},
    {"version": 0},
    {"version_label": "stable"},
], ids=["bare", "version+signature+filter", "version0", "label"])
def test_encoded_request_parses_to_the_same_official_message(tf, spec):
    inputs = {"images": sample(np.float32, (2, 8, 8, 1)), "ids": sample(np.int64, (2,)),
              "text": np.array([b"a", "b\u00e9"], dtype=object), "flag": np.array(True)}
    wire = codec.encode_predict_request("digits", inputs, **spec)
    parsed = predict_pb2.PredictRequest.FromString(wire)
    official = _official_request(tf, "digits", inputs, **spec)
    assert parsed.model_spec == official.model_spec
    assert parsed.output_filter == official.output_filter
    assert set(parsed.inputs) == set(official.inputs)
    for key in inputs:
        assert parsed.inputs[key].dtype == official.inputs[key].dtype
        assert parsed.inputs[key].tensor_shape == official.inputs[key].tensor_shape
        np.testing.assert_array_equal(tf.make_ndarray(parsed.inputs[key]), tf.make_ndarray(official.inputs[key]))


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_survives_request_bytes_both_ways(tf, dtype):
    x = sample(dtype, (3, 2))
    wire = codec.encode_predict_request("m", {"x": x, "empty": np.zeros((0, 2), dtype)})
    official = predict_pb2.PredictRequest.FromString(wire)
    np.testing.assert_array_equal(tf.make_ndarray(official.inputs["x"]), x)
    decoded = codec.decode_predict_request(wire)
    assert decoded["x"].dtype == x.dtype and decoded["empty"].shape == (0, 2)
    np.testing.assert_array_equal(decoded["x"], x)


@pytest.mark.parametrize("typed", [False, True], ids=["tensor_content", "typed_val"])
def test_decodes_official_responses(tf, typed):
    outputs = {"probabilities": sample(np.float32, (2, 10)), "classes": np.array([[b"cat"], [b"dog"]], dtype=object),
               "half": sample(np.float16, (2,)), "count": np.array(7, np.int64)}
    response = predict_pb2.PredictResponse()
    response.model_spec.name = "digits"
    for key, value in outputs.items():
        if typed:
            codec.ndarray_to_tensor_proto(value, response.outputs[key], use_tensor_content=False)
        else:
            response.outputs[key].CopyFrom(tf.make_tensor_proto(value))
    decoded = codec.decode_predict_response(response.SerializeToString())
    assert set(decoded) == set(outputs)
    for key, value in outputs.items():
        assert decoded[key].dtype == value.dtype and decoded[key].shape == value.shape
        np.testing.assert_array_equal(decoded[key], value)


def test_decoded_tensor_content_is_read_only_and_not_copied_again():
    x = sample(np.float32, (4, 4))
    wire = codec.encode_predict_request("m", {"x": x})
    decoded = codec.decode_predict_request(wire)["x"]
    assert not decoded.flags.writeable
    assert not decoded.flags.owndata


def test_a_large_message_is_decoded_without_copying_its_tensors():
    x = sample(np.float32, (ZERO_COPY_BYTES // 4,))
    wire = memoryview(codec.encode_predict_request("m", {"x": x}))
    decoded = codec.decode_predict_request(wire)["x"]
    assert np.shares_memory(decoded, np.frombuffer(wire, np.uint8))
    np.testing.assert_array_equal(decoded, x)


@pytest.mark.parametrize("typed", [False, True], ids=["tensor_content", "typed_val"])
def test_small_and_large_messages_decode_alike(typed):
    small = {"y": sample(np.float32, (2, 3)), "s": np.array([b"a", b"b"], dtype=object), "n": np.array(3, np.int64)}
    big = {**small, "pad": np.zeros(ZERO_COPY_BYTES // 4, np.float32)}
    for outputs in (small, big):
        response = predict_pb2.PredictResponse()
        for key, value in outputs.items():
            codec.ndarray_to_tensor_proto(value, response.outputs[key], use_tensor_content=not typed)
        decoded = codec.decode_predict_response(response.SerializeToString())
        assert set(decoded) == set(outputs)
        for key, value in outputs.items():
            assert decoded[key].dtype == value.dtype
            np.testing.assert_array_equal(decoded[key], value)


def test_encoded_response_parses_with_the_official_message(tf):
    outputs = {"y": sample(np.float64, (2, 2)), "s": np.array([b"q"], dtype=object)}
    wire = codec.encode_predict_response(outputs, model_name="m", version=5, signature_name="sig")
    parsed = predict_pb2.PredictResponse.FromString(wire)
    assert parsed.model_spec.name == "m" and parsed.model_spec.version.value == 5
    assert parsed.model_spec.signature_name == "sig"
    for key, value in outputs.items():
        np.testing.assert_array_equal(tf.make_ndarray(parsed.outputs[key]), value)


def test_big_endian_input_is_sent_little_endian(tf):
    x = np.arange(6, dtype=">i4").reshape(2, 3)
    parsed = predict_pb2.PredictRequest.FromString(codec.encode_predict_request("m", {"x": x}))
    np.testing.assert_array_equal(tf.make_ndarray(parsed.inputs["x"]), x)


def test_non_contiguous_input_is_encoded_by_value(tf):
    x = sample(np.float32, (4, 6))[:, ::2]
    parsed = predict_pb2.PredictRequest.FromString(codec.encode_predict_request("m", {"x": x}))
    np.testing.assert_array_equal(tf.make_ndarray(parsed.inputs["x"]), x)


@pytest.mark.parametrize("elements", [8, ZERO_COPY_BYTES], ids=["small", "large"])
def test_truncated_bytes_raise_value_error(elements):
    wire = codec.encode_predict_request("m", {"x": sample(np.float32, (elements,))})
    with pytest.raises(ValueError, match="truncated"):
        codec.decode_predict_request(wire[:-3])


def test_tensor_proto_fallback_handles_official_scalar_typed_fill():
    response = predict_pb2.PredictResponse()
    tensor = response.outputs["y"]
    tensor.CopyFrom(tensor_pb2.TensorProto(dtype=1, float_val=[2.0]))
    tensor.tensor_shape.dim.add().size = 3
    np.testing.assert_array_equal(codec.decode_predict_response(response.SerializeToString())["y"],
                                  np.full(3, 2.0, np.float32))
