"""The SDK's declared wire schema vs the official tensorflow_serving / tensorflow messages."""
from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import descriptor_pool
from tensorflow.core.example import example_pb2
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_management_pb2,
    predict_pb2,
    regression_pb2,
)

from serving.client._grpc_protocol import GrpcProtocol
from serving.client._protocol import ModelRef, finish
from serving.client._types import ModelMetadata
from serving.wire import apis, methods

# Our message name -> the official full name it declares.
OFFICIAL = {
    "TensorShapeProto": "tensorflow.TensorShapeProto", "TensorShapeProto.Dim": "tensorflow.TensorShapeProto.Dim",
    "TensorProto": "tensorflow.TensorProto", "BytesList": "tensorflow.BytesList",
    "FloatList": "tensorflow.FloatList", "Int64List": "tensorflow.Int64List", "Feature": "tensorflow.Feature",
    "Features": "tensorflow.Features", "Example": "tensorflow.Example", "TensorInfo": "tensorflow.TensorInfo",
    "TensorInfo.CooSparse": "tensorflow.TensorInfo.CooSparse", "SignatureDef": "tensorflow.SignatureDef",
    "ServableVersionPolicy": "tensorflow.serving.FileSystemStoragePathSourceConfig.ServableVersionPolicy",
    "ServableVersionPolicy.Latest": "tensorflow.serving.FileSystemStoragePathSourceConfig.ServableVersionPolicy.Latest",
    "ServableVersionPolicy.All": "tensorflow.serving.FileSystemStoragePathSourceConfig.ServableVersionPolicy.All",
    "ServableVersionPolicy.Specific":
        "tensorflow.serving.FileSystemStoragePathSourceConfig.ServableVersionPolicy.Specific",
}
SERVING = ["ModelSpec", "PredictRequest", "PredictResponse", "ExampleList", "ExampleListWithContext", "Input",
           "Class", "Classifications", "ClassificationResult", "ClassificationRequest", "ClassificationResponse",
           "Regression", "RegressionResult", "RegressionRequest", "RegressionResponse", "SignatureDefMap",
           "GetModelMetadataRequest", "GetModelMetadataResponse", "StatusProto", "GetModelStatusRequest",
           "ModelVersionStatus", "GetModelStatusResponse", "ModelConfig", "ModelConfigList", "ModelServerConfig",
           "ReloadConfigRequest", "Metric", "ReloadConfigResponse"]
OFFICIAL.update({name: f"tensorflow.serving.{name}" for name in SERVING})


def _ours(name: str):
    return apis.DESCRIPTOR.message_types_by_name[name.split(".")[0]] if "." not in name else \
        apis.DESCRIPTOR.message_types_by_name[name.split(".")[0]].nested_types_by_name[name.split(".")[1]]


@pytest.fixture(scope="module")
def official_pool():
    # Importing these registers every official message in the default pool.
    for module in (predict_pb2, classification_pb2, regression_pb2, get_model_metadata_pb2,
                   get_model_status_pb2, model_management_pb2, example_pb2):
        assert module.DESCRIPTOR
    return descriptor_pool.Default()


def _official_name(message_type) -> str:
    """The official full name our message type stands for."""
    if message_type.full_name.startswith("google.protobuf."):
        return message_type.full_name
    return OFFICIAL[message_type.full_name.removeprefix("tfs_stack.wire.")]


def _assert_same_field(field, other) -> None:
    assert (field.number, field.type, field.label) == (other.number, other.type, other.label), field.name
    if field.message_type is None:
        return
    if field.message_type.GetOptions().map_entry:
        assert other.message_type.GetOptions().map_entry, field.name
        _assert_same_field(field.message_type.fields_by_name["key"], other.message_type.fields_by_name["key"])
        _assert_same_field(field.message_type.fields_by_name["value"], other.message_type.fields_by_name["value"])
    else:
        assert _official_name(field.message_type) == other.message_type.full_name, field.name


@pytest.mark.parametrize("ours,official", sorted(OFFICIAL.items()), ids=lambda v: v)
def test_every_declared_field_has_the_official_number_type_and_label(official_pool, ours, official):
    mine = _ours(ours)
    theirs = official_pool.FindMessageTypeByName(official)
    assert mine.full_name.startswith("tfs_stack.wire.")
    for field in mine.fields:
        other = theirs.fields_by_name.get(field.name)
        assert other is not None, f"{official} has no field {field.name}"
        _assert_same_field(field, other)


def test_enums_have_the_official_numbers():
    for value in apis.DataType.DESCRIPTOR.values:
        assert types_pb2.DataType.Value(value.name) == value.number
    status_enum = get_model_status_pb2.ModelVersionStatus.State
    for value in apis.ModelVersionStatus.State.DESCRIPTOR.values:
        assert status_enum.Value(value.name) == value.number


def test_the_wire_package_does_not_clash_with_official_names(official_pool):
    assert apis.DESCRIPTOR.name == "tfs_stack/wire/serving_apis.proto" and apis.DESCRIPTOR.package == "tfs_stack.wire"
    assert official_pool.FindMessageTypeByName("tensorflow.serving.PredictRequest") is not \
        official_pool.FindMessageTypeByName("tfs_stack.wire.PredictRequest")


class _Sent(Exception):
    """Stops a protocol generator at its first call: the test only reads the request."""


def _first_call(gen):
    calls = []

    def send(call):
        calls.append(call)
        raise _Sent
    with pytest.raises(_Sent):
        finish(gen, send)
    return calls[0]


def test_classify_request_parses_with_the_official_message():
    call = _first_call(GrpcProtocol().classify(ModelRef("text", version=3), [{"text": "hi", "n": [1, 2]}],
                                               {"lang": b"en"}, "classification"))
    assert call.method == methods.CLASSIFY == "/tensorflow.serving.PredictionService/Classify"
    request = classification_pb2.ClassificationRequest.FromString(call.body)
    expected = classification_pb2.ClassificationRequest()
    expected.model_spec.name = "text"
    expected.model_spec.version.value = 3
    expected.model_spec.signature_name = "classification"
    listed = expected.input.example_list_with_context
    listed.context.features.feature["lang"].bytes_list.value.append(b"en")
    example = listed.examples.add()
    example.features.feature["text"].bytes_list.value.append(b"hi")
    example.features.feature["n"].int64_list.value.extend([1, 2])
    assert request == expected


def test_metadata_and_status_requests_parse_with_official_messages():
    protocol = GrpcProtocol()
    call = _first_call(protocol.metadata(ModelRef("digits", label="stable")))
    assert call.method == "/tensorflow.serving.PredictionService/GetModelMetadata"
    request = get_model_metadata_pb2.GetModelMetadataRequest.FromString(call.body)
    assert request.model_spec.version_label == "stable" and list(request.metadata_field) == ["signature_def"]
    call = _first_call(protocol.status(ModelRef("digits", version=0)))
    assert call.method == "/tensorflow.serving.ModelService/GetModelStatus"
    request = get_model_status_pb2.GetModelStatusRequest.FromString(call.body)
    assert request.model_spec.HasField("version") and request.model_spec.version.value == 0


def test_reload_request_parses_with_the_official_message():
    call = _first_call(GrpcProtocol().reload_config(
        'model_config_list { config { name: "a" base_path: "/m/a" model_version_policy { latest { num_versions: 2 } } } }'))
    assert call.method == "/tensorflow.serving.ModelService/HandleReloadConfigRequest"
    request = model_management_pb2.ReloadConfigRequest.FromString(call.body)
    config = request.config.model_config_list.config[0]
    assert (config.name, config.base_path, config.model_version_policy.latest.num_versions) == ("a", "/m/a", 2)


def test_official_metadata_response_with_any_decodes():
    response = get_model_metadata_pb2.GetModelMetadataResponse()
    response.model_spec.name = "m"
    response.model_spec.version.value = 7
    defs = get_model_metadata_pb2.SignatureDefMap()
    info = defs.signature_def["serving_default"].inputs["x"]
    info.name, info.dtype = "x:0", 7
    info.tensor_shape.unknown_rank = True
    response.metadata["signature_def"].Pack(defs)
    assert response.metadata["signature_def"].type_url == methods.SIGNATURE_DEF_MAP_TYPE_URL
    meta = GrpcProtocol().parse_metadata(response.SerializeToString())
    assert isinstance(meta, ModelMetadata) and meta.version == 7
    spec = meta.signatures["serving_default"].inputs["x"]
    assert spec.dtype == np.dtype(object) and spec.shape is None and spec.tensor_name == "x:0"
