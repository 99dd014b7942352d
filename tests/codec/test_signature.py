"""One Signature/TensorSpec decoder: TensorFlow's own protos and helpers are the oracle."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from google.protobuf import json_format
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import meta_graph_pb2

from serving import codec
from serving.checkout import REPO_ROOT
from serving.codec import (
    CLASSIFY_METHOD_NAME,
    DEFAULT_SIGNATURE,
    PREDICT_METHOD_NAME,
    REGRESS_METHOD_NAME,
    Signature,
    TensorSpec,
)
from serving.wire import apis

# (alias, TF dtype, shape as tf.TensorShape takes it: None = unknown rank, None dims = -1)
TENSORS = [
    ("images", "float32", [None, 8, 8, 1]),
    ("text", "string", [None]),
    ("ids", "int64", [None, None]),
    ("anything", "float16", None),
    ("scalar", "bool", []),
    ("big", "uint64", [3, None]),
]


@pytest.fixture(scope="module")
def signature_def(tf):
    """An official SignatureDef built by TensorFlow from placeholders of every kind of shape."""
    with tf.Graph().as_default():
        def info(dtype, shape):
            placeholder = tf.compat.v1.placeholder(tf.as_dtype(dtype), shape=shape)
            return tf.compat.v1.saved_model.build_tensor_info(placeholder)
        inputs = {alias: info(dtype, shape) for alias, dtype, shape in TENSORS}
        outputs = {"y": info("float32", [None, 10])}
        return tf.compat.v1.saved_model.build_signature_def(inputs, outputs, PREDICT_METHOD_NAME)


def test_constants_are_tensorflows_signature_constants(tf):
    assert DEFAULT_SIGNATURE == tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY
    assert PREDICT_METHOD_NAME == tf.saved_model.PREDICT_METHOD_NAME
    assert CLASSIFY_METHOD_NAME == tf.saved_model.CLASSIFY_METHOD_NAME
    assert REGRESS_METHOD_NAME == tf.saved_model.REGRESS_METHOD_NAME


def test_official_signature_def_decodes_as_tensorflow_reads_it(tf, signature_def):
    signature = Signature.from_signature_def("sig", signature_def)
    assert signature.name == "sig" and signature.method_name == PREDICT_METHOD_NAME
    assert list(signature.inputs) == sorted(alias for alias, _, _ in TENSORS)
    for alias, info in signature_def.inputs.items():
        spec = signature.inputs[alias]
        oracle = tf.TensorShape(info.tensor_shape)
        expected_shape = None if oracle.rank is None else tuple(oracle.as_list())
        expected_dtype = tf.as_dtype(info.dtype)
        assert spec.shape == expected_shape, alias
        assert spec.dtype == np.dtype(expected_dtype.as_numpy_dtype), alias
        assert spec.dtype_enum == expected_dtype.as_datatype_enum
        assert spec.dtype_name == types_pb2.DataType.Name(info.dtype)
        assert spec.tensor_name == info.name and spec.dtype_supported
        assert spec.dims == (None if oracle.rank is None else tuple(d.size for d in info.tensor_shape.dim))


def test_wire_signature_def_decodes_equal_to_the_official_one(signature_def):
    wire = apis.SignatureDef.FromString(signature_def.SerializeToString())
    assert Signature.from_signature_def("sig", wire) == Signature.from_signature_def("sig", signature_def)


def test_rest_json_metadata_decodes_equal_to_the_official_proto(signature_def):
    """The REST client's path: MessageToDict of the official map, parsed into the wire map."""
    official = meta_graph_pb2.SignatureDef()
    official.CopyFrom(signature_def)
    doc = json_format.MessageToDict(official, preserving_proto_field_name=True)
    wire = json_format.ParseDict(json.loads(json.dumps(doc)), apis.SignatureDef())
    assert Signature.from_signature_def("sig", wire) == Signature.from_signature_def("sig", official)


def test_a_spec_built_by_hand_equals_the_decoded_one(signature_def):
    decoded = Signature.from_signature_def("sig", signature_def).inputs["images"]
    assert decoded == TensorSpec("images", np.float32, (None, 8, 8, 1), signature_def.inputs["images"].name)
    assert TensorSpec("s", np.dtype(object), ()).dtype_enum == types_pb2.DT_STRING


def test_a_dtype_the_codec_does_not_carry_is_object_and_named_as_tensorflow_names_it():
    info = meta_graph_pb2.TensorInfo(name="handle:0", dtype=types_pb2.DT_RESOURCE)
    info.tensor_shape.SetInParent()
    spec = TensorSpec.from_tensor_info("handle", info)
    assert spec.dtype == np.dtype(object) and not spec.dtype_supported
    assert spec.dtype_enum == types_pb2.DT_RESOURCE and spec.dtype_name == "DT_RESOURCE"
    assert spec.shape == () and spec != TensorSpec("handle", np.dtype(object), (), "handle:0")
    assert TensorSpec.from_json("handle", spec.to_json()) == spec
    older = {"dtype": f"DataType {types_pb2.DT_RESOURCE}", "shape": [], "tensor_name": "handle:0"}
    assert TensorSpec.from_json("handle", older) == spec  # manifests written before TF's names were used


def test_the_init_op_output_is_dt_invalid_not_a_string():
    info = meta_graph_pb2.TensorInfo(name="NoOp")  # as a SavedModel's __saved_model_init_op declares it
    info.tensor_shape.unknown_rank = True
    spec = TensorSpec.from_tensor_info("__saved_model_init_op", info)
    assert spec.dtype_name == "DT_INVALID" and spec.dtype_enum == types_pb2.DT_INVALID
    assert not spec.dtype_supported and spec.shape is None


def test_a_tensor_info_without_a_shape_has_unknown_rank():
    for message in (meta_graph_pb2.TensorInfo, apis.TensorInfo):
        spec = TensorSpec.from_tensor_info("x", message(name="x:0", dtype=types_pb2.DT_FLOAT))
        assert spec.shape is None and spec.dims is None and spec.accepts_shape((2, 3))


def test_manifest_json_round_trips_and_keeps_the_manifest_format(signature_def):
    signature = Signature.from_signature_def(DEFAULT_SIGNATURE, signature_def)
    doc = json.loads(json.dumps(signature.to_json()))
    assert Signature.from_json(DEFAULT_SIGNATURE, doc) == signature
    assert doc["method_name"] == PREDICT_METHOD_NAME
    assert doc["inputs"]["images"] == {"dtype": "DT_FLOAT", "shape": [-1, 8, 8, 1],
                                       "tensor_name": signature_def.inputs["images"].name}
    assert doc["inputs"]["anything"]["shape"] is None and doc["inputs"]["scalar"]["shape"] == []
    assert doc["inputs"]["text"]["dtype"] == "DT_STRING"


def test_an_unknown_dtype_name_in_a_manifest_is_rejected():
    with pytest.raises(ValueError, match="DT_BOGUS"):
        TensorSpec.from_json("x", {"dtype": "DT_BOGUS", "shape": [-1], "tensor_name": "x:0"})


@pytest.mark.parametrize("record, field", [
    ({"dtype": "DT_FLOAT", "shape": [-1], "tensor_name": 7}, "tensor_name"),
    ({"dtype": 1, "shape": [-1], "tensor_name": "x:0"}, "dtype"),
    ({"dtype": "DT_FLOAT", "shape": "-1", "tensor_name": "x:0"}, "shape"),
    ({"dtype": "DT_FLOAT", "shape": [None], "tensor_name": "x:0"}, "shape"),
])
def test_a_manifest_tensor_field_of_the_wrong_json_type_is_type_error(record, field):
    """A ``tensor_name`` that is not a string was kept as it was (a spec with an int for its graph tensor)."""
    with pytest.raises(TypeError, match=field):
        TensorSpec.from_json("x", record)


@pytest.mark.parametrize("record, field", [
    ({"method_name": None, "inputs": {}, "outputs": {}}, "method_name"),
    ({"method_name": PREDICT_METHOD_NAME, "inputs": [], "outputs": {}}, "'inputs' and 'outputs'"),
    ({"method_name": PREDICT_METHOD_NAME, "inputs": {"x": "DT_FLOAT"}, "outputs": {}}, "tensor 'x'"),
])
def test_a_manifest_signature_field_of_the_wrong_json_type_is_type_error(record, field):
    """A ``method_name`` that is not a string was kept as it was; ``inputs`` that are a list were AttributeError."""
    with pytest.raises(TypeError, match=field):
        Signature.from_json(DEFAULT_SIGNATURE, record)


@pytest.mark.parametrize("shape, accepted, rejected", [
    ((None, 8), [(1, 8), (64, 8)], [(1, 9), (8,), (1, 8, 1)]),
    ((), [()], [(1,)]),
    (None, [(), (3,), (1, 2, 3)], []),
])
def test_accepts_shape_checks_rank_and_known_dimensions(shape, accepted, rejected):
    spec = TensorSpec("x", np.float32, shape)
    assert all(spec.accepts_shape(s) for s in accepted)
    assert not any(spec.accepts_shape(s) for s in rejected)


def test_the_codec_package_exports_the_vocabulary_without_tensorflow():
    assert {"TensorSpec", "Signature", "DEFAULT_SIGNATURE", "PREDICT_METHOD_NAME", "CLASSIFY_METHOD_NAME",
            "REGRESS_METHOD_NAME"} <= set(codec.__all__)
    code = "import sys, serving.codec; print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"
