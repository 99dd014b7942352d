"""gRPC specifics with the official stubs: status codes, truncation, message size, deadlines, reload."""
from __future__ import annotations

import time

import grpc
import numpy as np
import pytest

from tests.support.contract import layout
from tests.support.contract.clients import StubGrpcClient
from tests.support.contract.helpers import manifest


@pytest.fixture
def stub(endpoint):
    client = StubGrpcClient(endpoint.grpc_target)
    yield client
    client.close()


def _rpc_error(call, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call(*args, **kwargs)
    return caught.value


def _predict_request(model: str, inputs: dict, **spec):
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    for key, value in spec.items():
        setattr(request.model_spec, key, value)
    for key, value in inputs.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    return request


def test_status_codes_are_copied_from_the_canonical_code(stub):
    zeros = {"images": np.zeros((1, 8, 8, 1), np.float32)}
    assert _rpc_error(stub.predictions.Predict, _predict_request("nope", zeros), timeout=30).code() \
        == grpc.StatusCode.NOT_FOUND
    assert _rpc_error(stub.predictions.Predict, _predict_request("digits_versions", zeros, version_label="x"),
                      timeout=30).code() == grpc.StatusCode.INVALID_ARGUMENT


def test_long_error_messages_are_truncated_at_1024_chars(stub):
    name = "m" * 3000
    error = _rpc_error(stub.predictions.Predict, _predict_request(name, {"x": np.zeros(1, np.float32)}), timeout=30)
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert len(error.details()) == 1024 + len("...TRUNCATED")
    assert error.details().startswith("Servable not found for request: Latest(mmm")
    assert error.details().endswith("...TRUNCATED")


def test_requests_and_responses_over_4_mib_pass(stub, endpoint):
    images = np.tile(manifest(endpoint.repo, "digits").sample_inputs()["images"], (20000, 1, 1, 1))
    assert images.nbytes > 4 * 1024 * 1024
    response = stub.predictions.Predict(_predict_request("digits", {"images": images}), timeout=120)
    assert response.outputs["probabilities"].tensor_shape.dim[0].size == 20000


def test_an_expired_deadline_is_deadline_exceeded(stub, endpoint):
    images = manifest(endpoint.repo, "digits").sample_inputs()["images"]
    error = _rpc_error(stub.predictions.Predict, _predict_request("digits", {"images": images}), timeout=0.0001)
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_get_model_metadata_needs_a_supported_metadata_field(stub):
    from tensorflow_serving.apis import get_model_metadata_pb2

    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "digits"
    error = _rpc_error(stub.predictions.GetModelMetadata, request, timeout=30)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "GetModelMetadataRequest must specify at least one metadata_field"
    request.metadata_field.append("graph")
    error = _rpc_error(stub.predictions.GetModelMetadata, request, timeout=30)
    assert error.details() == "Metadata field graph is not supported"


def test_predict_response_names_the_servable_and_signature(stub, endpoint):
    images = manifest(endpoint.repo, "digits").sample_inputs()["images"]
    response = stub.predictions.Predict(_predict_request("digits", {"images": images}), timeout=30)
    assert (response.model_spec.name, response.model_spec.version.value,
            response.model_spec.signature_name) == ("digits", 1, "serving_default")


def test_reload_config_adds_and_removes_models(stub, endpoint):
    from google.protobuf import text_format
    from tensorflow_serving.apis import model_management_pb2
    from tensorflow_serving.config import model_server_config_pb2

    original = layout.model_config_text(endpoint.root_in_server)
    config = text_format.Parse(original, model_server_config_pb2.ModelServerConfig())
    extra = config.model_config_list.config.add()
    extra.CopyFrom(config.model_config_list.config[0])
    extra.name = "digits_reloaded"
    try:
        response = stub.models.HandleReloadConfigRequest(
            model_management_pb2.ReloadConfigRequest(config=config), timeout=300)
        assert response.status.error_code == 0
        assert stub.status("digits_reloaded")[0].state == "AVAILABLE"
    finally:
        restore = text_format.Parse(original, model_server_config_pb2.ModelServerConfig())
        stub.models.HandleReloadConfigRequest(model_management_pb2.ReloadConfigRequest(config=restore), timeout=300)
    deadline = time.monotonic() + 60
    while {s.state for s in stub.status("digits_reloaded")} - {"UNLOADING", "END"}:
        assert time.monotonic() < deadline, "digits_reloaded was never unloaded after the config dropped it"
        time.sleep(0.2)


def test_reload_config_moving_a_label_to_an_unloaded_version_fails_precondition(stub, endpoint):
    from google.protobuf import text_format
    from tensorflow_serving.apis import model_management_pb2
    from tensorflow_serving.config import model_server_config_pb2

    config = text_format.Parse(layout.model_config_text(endpoint.root_in_server), model_server_config_pb2.ModelServerConfig())
    versions = next(c for c in config.model_config_list.config if c.name == "digits_versions")
    versions.version_labels["stable"] = 9   # an in-use label may only move to an available version
    error = _rpc_error(stub.models.HandleReloadConfigRequest,
                       model_management_pb2.ReloadConfigRequest(config=config), timeout=60)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error.details() == ("Request to assign label to version 9 of model digits_versions, "
                               "which is not currently available for inference")
    assert stub.status("digits")[0].state == "AVAILABLE"
    assert stub.metadata("digits_versions", label="stable").version == 1


def test_multi_inference_answers_like_classify(stub, endpoint):
    from tensorflow_serving.apis import inference_pb2

    from tests.support.contract.clients import _examples_to_protos
    from tests.support.contract.helpers import examples_from_serialized

    examples = examples_from_serialized(manifest(endpoint.repo, "text").golden_inputs("classification")["inputs"][:3])
    request = inference_pb2.MultiInferenceRequest()
    task = request.tasks.add()
    task.model_spec.name, task.model_spec.signature_name = "text", "classification"
    task.method_name = "tensorflow/serving/classify"
    request.input.example_list.examples.extend(_examples_to_protos(examples))
    response = stub.predictions.MultiInference(request, timeout=60)
    (result,) = response.results
    assert (result.model_spec.name, result.model_spec.version.value) == ("text", 1)
    labels = [[c.label for c in item.classes] for item in result.classification_result.classifications]
    expected = stub.classify("text", examples, signature="classification")
    assert labels == [[label for label, _ in row] for row in expected]


def test_multi_inference_refuses_predict_tasks_as_unimplemented(stub):
    from tensorflow_serving.apis import inference_pb2

    request = inference_pb2.MultiInferenceRequest()
    task = request.tasks.add()
    task.model_spec.name, task.model_spec.signature_name = "text", "classification"
    task.method_name = "tensorflow/serving/predict"
    request.input.example_list.examples.add()
    error = _rpc_error(stub.predictions.MultiInference, request, timeout=60)
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED
    assert error.details() == "Unsupported signature method_name: tensorflow/serving/predict"
