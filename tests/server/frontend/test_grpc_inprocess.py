"""The gRPC front-end in process over the data plane, driven with TF Serving's official stubs."""
from __future__ import annotations

from typing import Iterator

import grpc
import numpy as np
import pytest
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)
from tensorflow_serving.config import model_server_config_pb2

from serving import codec
from tests.support.serving import examples_input

X = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0]], np.float32)
ROWS = [{"x": [1.0, 2.0, 3.0]}, {"x": [0.0, 0.0, 1.0]}]


@pytest.fixture
def channel(grpc_frontend) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{grpc_frontend.bound_ports[0]}") as opened:
        yield opened


@pytest.fixture
def prediction(channel) -> prediction_service_pb2_grpc.PredictionServiceStub:
    return prediction_service_pb2_grpc.PredictionServiceStub(channel)


@pytest.fixture
def models(channel) -> model_service_pb2_grpc.ModelServiceStub:
    return model_service_pb2_grpc.ModelServiceStub(channel)


def test_predict_answers_with_tensor_protos_and_the_model_spec(prediction):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "tiny"
    codec.ndarray_to_tensor_proto(X, request.inputs["x"])
    response = prediction.Predict(request, timeout=30)
    assert (response.model_spec.name, response.model_spec.version.value,
            response.model_spec.signature_name) == ("tiny", 1, "serving_default")
    np.testing.assert_array_equal(codec.tensor_proto_to_ndarray(response.outputs["y"]), 2 * X)
    np.testing.assert_array_equal(codec.tensor_proto_to_ndarray(response.outputs["total"]), [12.0, 2.0])


def test_classify_fills_a_classification_response(prediction):
    request = classification_pb2.ClassificationRequest(input=examples_input(ROWS))
    request.model_spec.name, request.model_spec.signature_name = "tiny", "classification"
    response = prediction.Classify(request, timeout=30)
    assert (response.model_spec.version.value, response.model_spec.signature_name) == (1, "classification")
    assert codec.classification_result_to_list(response.result)[0][0][0] == "low"
    assert [[c.label for c in row.classes] for row in response.result.classifications] == [["low", "high"]] * 2
    assert response.result.classifications[0].classes[1].score > 0.99


def test_regress_fills_a_regression_response(prediction):
    request = regression_pb2.RegressionRequest(input=examples_input(ROWS))
    request.model_spec.name, request.model_spec.signature_name = "tiny", "regression"
    response = prediction.Regress(request, timeout=30)
    assert [r.value for r in response.result.regressions] == [12.0, 2.0]
    assert response.model_spec.name == "tiny"


def test_multi_inference_answers_each_task_with_its_model_spec(prediction):
    request = inference_pb2.MultiInferenceRequest(input=examples_input(ROWS))
    for signature, method in (("classification", "classify"), ("regression", "regress")):
        task = request.tasks.add(method_name=f"tensorflow/serving/{method}")
        task.model_spec.name, task.model_spec.signature_name = "tiny", signature
    response = prediction.MultiInference(request, timeout=30)
    classified, regressed = response.results
    assert classified.model_spec.signature_name == "classification" and classified.model_spec.version.value == 1
    assert len(classified.classification_result.classifications) == 2
    assert [r.value for r in regressed.regression_result.regressions] == [12.0, 2.0]


def test_get_model_metadata_packs_the_servables_signature_def_map(prediction, tiny_manager):
    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    request.model_spec.name = "tiny"
    response = prediction.GetModelMetadata(request, timeout=30)
    assert (response.model_spec.name, response.model_spec.version.value) == ("tiny", 1)
    assert not response.model_spec.signature_name
    signature_map = get_model_metadata_pb2.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(signature_map)
    with tiny_manager.acquire("tiny") as servable:
        assert dict(signature_map.signature_def) == dict(servable.signature_defs)


def test_get_model_status_lists_versions_with_proto_states(models):
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = "tiny"
    (entry,) = models.GetModelStatus(request, timeout=30).model_version_status
    assert (entry.version, entry.state, entry.status.error_code, entry.status.error_message) == (
        1, get_model_status_pb2.ModelVersionStatus.AVAILABLE, 0, "")


def test_errors_become_grpc_statuses_with_tf_servings_messages(prediction, models):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "nope"
    with pytest.raises(grpc.RpcError) as missing:
        prediction.Predict(request, timeout=30)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    assert missing.value.details() == "Servable not found for request: Latest(nope)"
    with pytest.raises(grpc.RpcError) as no_spec:
        models.GetModelStatus(get_model_status_pb2.GetModelStatusRequest(), timeout=30)
    assert (no_spec.value.code(), no_spec.value.details()) == (grpc.StatusCode.INVALID_ARGUMENT, "Missing ModelSpec")


def test_reload_config_refuses_anything_but_a_model_config_list(models):
    config = model_server_config_pb2.ModelServerConfig()
    config.custom_model_config.Pack(model_server_config_pb2.ModelServerConfig())
    with pytest.raises(grpc.RpcError) as refused:
        models.HandleReloadConfigRequest(model_management_pb2.ReloadConfigRequest(config=config), timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details().startswith("ServerModelConfig type not supported by HandleReloadConfigRequest.")
