"""The data plane in process, over a real ServableManager serving the tiny model: plain answers, TF Serving's errors."""
from __future__ import annotations

import time

import numpy as np
import pytest
from tensorflow_serving.config import model_server_config_pb2

from serving import status
from serving.codec import ModelMetadata, VersionState, VersionStatus
from serving.server.frontends.dataplane import InferenceResult, InferenceTask, ModelSpec, Prediction
from serving.server.tensorflow.inference import Class, ClassificationResult, RegressionResult
from serving.status import Code
from tests.support.serving import examples_input

X = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0]], np.float32)
ROWS = [{"x": [1.0, 2.0, 3.0]}, {"x": [0.0, 0.0, 1.0]}]
CLASSIFY, REGRESS = "tensorflow/serving/classify", "tensorflow/serving/regress"


def sample(metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_predict_returns_numpy_outputs_and_who_answered(dataplane):
    prediction = dataplane.predict(ModelSpec("tiny"), {"x": X})
    assert isinstance(prediction, Prediction)
    assert (prediction.name, prediction.version, prediction.signature_name) == ("tiny", 1, "serving_default")
    np.testing.assert_array_equal(prediction.outputs["y"], 2 * X)
    np.testing.assert_array_equal(prediction.outputs["total"], [12.0, 2.0])


def test_predict_output_filter_and_version_pick_what_is_run(dataplane):
    prediction = dataplane.predict(ModelSpec("tiny", version=1), {"x": X}, ["total"])
    assert list(prediction.outputs) == ["total"]


def test_predict_errors_are_tf_servings(dataplane):
    with pytest.raises(status.NotFound) as missing:
        dataplane.predict(ModelSpec("nope"), {"x": X})
    assert missing.value.details == "Servable not found for request: Latest(nope)"
    with pytest.raises(status.NotFound, match=r"Specific\(tiny, 7\)"):
        dataplane.predict(ModelSpec("tiny", version=7), {"x": X})
    with pytest.raises(status.FailedPrecondition) as signature:
        dataplane.predict(ModelSpec("tiny", signature_name="nope"), {"x": X})
    assert signature.value.details == 'Serving signature key "nope" not found.'


def test_a_deadline_already_past_fails_before_the_model_runs(dataplane, metrics):
    with pytest.raises(status.DeadlineExceeded):
        dataplane.predict(ModelSpec("tiny"), {"x": X}, deadline=time.monotonic() - 1)
    assert sample(metrics, ":tensorflow:serving:runtime_latency_count",
                  model_name="tiny", API="Predict", runtime="TF1") == 0


def test_signature_is_rests_lookup_with_its_message(dataplane):
    signature = dataplane.signature(ModelSpec("tiny"))
    assert signature.name == "serving_default" and signature.inputs["x"].dtype == np.float32
    assert list(dataplane.signature(ModelSpec("tiny", signature_name="strings")).inputs) == ["s"]
    with pytest.raises(status.InvalidArgument) as unknown:
        dataplane.signature(ModelSpec("tiny", signature_name="nope"))
    assert unknown.value.details == 'Serving signature name: "nope" not found in signature def'


def test_classify_returns_a_plain_classification_result(dataplane):
    answer = dataplane.classify(ModelSpec("tiny", signature_name="classification"), examples_input(ROWS))
    assert isinstance(answer, InferenceResult) and isinstance(answer.result, ClassificationResult)
    assert (answer.name, answer.version, answer.signature_name) == ("tiny", 1, "classification")
    labels = [[c.label for c in row.classes] for row in answer.result.classifications]
    assert labels == [["low", "high"]] * 2
    first = answer.result.classifications[0].classes
    assert first[1].score > 0.99 and first[0] == Class("low", pytest.approx(1.0 - first[1].score, abs=1e-6))


def test_regress_returns_a_plain_regression_result(dataplane):
    answer = dataplane.regress(ModelSpec("tiny", signature_name="regression"), examples_input(ROWS))
    assert isinstance(answer.result, RegressionResult)
    assert [r.value for r in answer.result.regressions] == [12.0, 2.0]


def test_classify_and_regress_errors_are_tf_servings(dataplane):
    with pytest.raises(status.InvalidArgument, match="^INVALID_ARGUMENT: No signature was found with the name: x$"):
        dataplane.classify(ModelSpec("tiny", signature_name="x"), examples_input(ROWS))
    with pytest.raises(status.InvalidArgument, match="^INVALID_ARGUMENT: Input is empty.$"):
        dataplane.regress(ModelSpec("tiny", signature_name="regression"), examples_input([]))


def test_multi_inference_answers_every_task_on_one_version(dataplane):
    tasks = [InferenceTask("tiny", "classification", CLASSIFY), InferenceTask("tiny", "regression", REGRESS)]
    classified, regressed = dataplane.multi_inference(ModelSpec("tiny"), tasks, examples_input(ROWS))
    assert (classified.signature_name, regressed.signature_name) == ("classification", "regression")
    assert len(classified.result.classifications) == 2
    assert [r.value for r in regressed.result.regressions] == [12.0, 2.0]


@pytest.mark.parametrize("tasks, error, message", [
    ([InferenceTask("", "classification", CLASSIFY)], status.InvalidArgument,
     "Found ModelSpec with an empty model name."),
    ([InferenceTask("tiny", "classification", CLASSIFY), InferenceTask("other", "regression", REGRESS)],
     status.InvalidArgument, "All ModelSpecs in a MultiInferenceRequest must access the same model name."),
    ([InferenceTask("tiny", "regression", REGRESS)] * 2, status.InvalidArgument,
     "Duplicate evaluation of signature: regression"),
    ([InferenceTask("tiny", "nope", REGRESS)], status.InvalidArgument,
     "Requested signature not found in model graph: nope"),
    ([InferenceTask("tiny", "regression", "tensorflow/serving/predict")], status.Unimplemented,
     "Unsupported signature method_name: tensorflow/serving/predict"),
])
def test_multi_inference_checks_its_tasks_as_tf_serving_does(dataplane, tasks, error, message):
    with pytest.raises(error) as caught:
        dataplane.multi_inference(ModelSpec("tiny"), tasks, examples_input(ROWS))
    assert caught.value.details == message


def test_model_metadata_carries_the_servables_signature_defs(dataplane, tiny_manager):
    metadata = dataplane.model_metadata(ModelSpec("tiny"), ["signature_def"])
    assert isinstance(metadata, ModelMetadata) and (metadata.model, metadata.version) == ("tiny", 1)
    with tiny_manager.acquire("tiny") as servable:
        assert dict(metadata.signature_defs) == dict(servable.signature_defs)
    assert {"serving_default", "classification", "regression", "strings"} <= set(metadata.signature_defs)


def test_model_metadata_needs_the_signature_def_field(dataplane):
    with pytest.raises(status.InvalidArgument) as none:
        dataplane.model_metadata(ModelSpec("tiny"), [])
    assert none.value.details == "GetModelMetadataRequest must specify at least one metadata_field"
    with pytest.raises(status.InvalidArgument) as other:
        dataplane.model_metadata(ModelSpec("tiny"), ["signature_def", "graph"])
    assert other.value.details == "Metadata field graph is not supported"


def test_model_status_is_a_list_of_version_statuses(dataplane):
    assert dataplane.model_status(ModelSpec("tiny")) == [VersionStatus(1, VersionState.AVAILABLE, Code.OK, "")]
    assert dataplane.model_status(ModelSpec("tiny", version=1))[0].state is VersionState.AVAILABLE
    with pytest.raises(status.NotFound) as missing:
        dataplane.model_status(ModelSpec("nope"))
    assert missing.value.details == "Could not find any versions of model nope"


def test_reload_config_takes_only_a_model_config_list(dataplane):
    config = model_server_config_pb2.ModelServerConfig()
    config.custom_model_config.Pack(model_server_config_pb2.ModelServerConfig())
    with pytest.raises(status.InvalidArgument) as caught:
        dataplane.reload_config(config)
    assert caught.value.details == ("ServerModelConfig type not supported by HandleReloadConfigRequest. "
                                    "Only ModelConfigList is currently supported")


def test_track_counts_each_request_under_the_code_it_ended_with(dataplane, metrics):
    with dataplane.track("tiny", "Predict", "GRPC"):
        dataplane.predict(ModelSpec("tiny"), {"x": X})
    with pytest.raises(status.NotFound), dataplane.track("tiny", "Predict", "GRPC"):
        dataplane.predict(ModelSpec("tiny", version=9), {"x": X})
    assert sample(metrics, ":tensorflow:serving:request_count", model_name="tiny", status="OK") == 1
    assert sample(metrics, ":tensorflow:serving:request_count", model_name="tiny", status="NOT_FOUND") == 1
    assert sample(metrics, ":tensorflow:serving:request_latency_count",
                  model_name="tiny", API="Predict", entrypoint="GRPC") == 1
    assert sample(metrics, ":tensorflow:serving:runtime_latency_count",
                  model_name="tiny", API="Predict", runtime="TF1") == 1
