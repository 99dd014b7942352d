"""numpy <-> TensorProto against TensorFlow's make_tensor_proto / make_ndarray."""
from __future__ import annotations

import numpy as np
import pytest
from tensorflow.core.framework import tensor_pb2, types_pb2

from serving import codec
from serving.wire import apis
from tests.support.arrays import NUMERIC_DTYPES, sample

SHAPES = [(2, 3), (), (0,), (4, 0, 2)]


@pytest.mark.parametrize("use_tensor_content", [True, False], ids=["tensor_content", "typed_val"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=lambda d: np.dtype(d).name)
def test_numeric_round_trip_matches_tensorflow(tf, dtype, shape, use_tensor_content):
    x = sample(dtype, shape)
    proto = codec.ndarray_to_tensor_proto(x, tensor_pb2.TensorProto(), use_tensor_content=use_tensor_content)
    assert proto.dtype == tf.as_dtype(x.dtype).as_datatype_enum
    np.testing.assert_array_equal(tf.make_ndarray(proto), x)
    back = codec.tensor_proto_to_ndarray(proto)
    assert back.dtype == x.dtype and back.shape == x.shape
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=lambda d: np.dtype(d).name)
def test_decodes_tensorflow_protos_in_both_forms(tf, dtype):
    x = sample(dtype, (3, 2), seed=1)
    packed = tf.make_tensor_proto(x)  # tensor_content for most dtypes, typed values for bool/uint16
    np.testing.assert_array_equal(codec.tensor_proto_to_ndarray(packed), x)
    typed = tensor_pb2.TensorProto(dtype=packed.dtype, tensor_shape=packed.tensor_shape)
    field = codec.dtype_from_enum(packed.dtype).val_field
    values = x.reshape(-1).view(np.uint16).tolist() if x.dtype == np.float16 else x.reshape(-1).tolist()
    getattr(typed, field).extend(values)
    np.testing.assert_array_equal(tf.make_ndarray(typed), x)
    np.testing.assert_array_equal(codec.tensor_proto_to_ndarray(typed), x)


def test_float16_typed_form_uses_half_val_bit_patterns(tf):
    x = np.array([1.5, -2.0, np.inf], dtype=np.float16)
    proto = codec.ndarray_to_tensor_proto(x, tensor_pb2.TensorProto(), use_tensor_content=False)
    assert list(proto.half_val) == x.view(np.uint16).tolist()
    assert proto.dtype == types_pb2.DT_HALF
    np.testing.assert_array_equal(tf.make_ndarray(proto), x)


@pytest.mark.parametrize("values", [[b"a", b"\xff\x00", b""], ["text", "h\u00e9"], []], ids=["bytes", "str", "empty"])
def test_strings_use_string_val_and_come_back_as_bytes(tf, values):
    x = np.array(values, dtype=object)
    proto = codec.ndarray_to_tensor_proto(x, tensor_pb2.TensorProto())
    expected = [v.encode() if isinstance(v, str) else v for v in values]
    assert list(proto.string_val) == expected
    assert tf.make_ndarray(proto).tolist() == expected
    back = codec.tensor_proto_to_ndarray(proto)
    assert back.dtype == object and back.tolist() == expected


def test_string_scalar_and_numpy_fixed_width_strings(tf):
    proto = codec.ndarray_to_tensor_proto(np.array(b"one"), tensor_pb2.TensorProto())
    assert tf.make_ndarray(proto) == b"one"
    proto = codec.ndarray_to_tensor_proto(np.array(["ab", "c"]), tensor_pb2.TensorProto())
    assert codec.tensor_proto_to_ndarray(proto).tolist() == [b"ab", b"c"]


def test_scalar_keeps_tensor_shape_set_like_tensorflow(tf):
    proto = codec.ndarray_to_tensor_proto(np.float32(2.5), tensor_pb2.TensorProto())
    official = tf.make_tensor_proto(np.float32(2.5))
    assert proto.HasField("tensor_shape") and official.HasField("tensor_shape")
    assert proto.tensor_shape == official.tensor_shape
    assert tf.make_ndarray(proto) == tf.make_ndarray(official)


def test_one_typed_value_fills_the_whole_shape_like_tensorflow(tf):
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32)
    proto.tensor_shape.dim.add().size = 4
    proto.int_val.append(7)
    np.testing.assert_array_equal(codec.tensor_proto_to_ndarray(proto), tf.make_ndarray(proto))


def test_tensor_content_of_the_wrong_size_is_rejected():
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_content=b"\0" * 8)
    proto.tensor_shape.dim.add().size = 3
    with pytest.raises(ValueError, match="needs 3"):
        codec.tensor_proto_to_ndarray(proto)


def test_unsupported_dtypes_are_named():
    with pytest.raises(ValueError, match="complex64"):
        codec.ndarray_to_tensor_proto(np.zeros(2, np.complex64), tensor_pb2.TensorProto())
    with pytest.raises(ValueError, match="DataType 20"):
        codec.tensor_proto_to_ndarray(tensor_pb2.TensorProto(dtype=20))


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES + [object], ids=lambda d: np.dtype(d).name)
def test_wire_tensor_proto_has_the_official_bytes(dtype):
    x = np.array([b"x", b"yz"], dtype=object) if dtype is object else sample(dtype, (2, 2))
    ours = codec.ndarray_to_tensor_proto(x, apis.TensorProto(), use_tensor_content=False)
    official = codec.ndarray_to_tensor_proto(x, tensor_pb2.TensorProto(), use_tensor_content=False)
    assert ours.SerializeToString() == official.SerializeToString()
    np.testing.assert_array_equal(codec.tensor_proto_to_ndarray(apis.TensorProto.FromString(
        official.SerializeToString())), x)
