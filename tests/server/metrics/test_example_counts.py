"""``request_example_counts`` moves where TF Serving records it: Classify, Regress and MultiInference.

Driven in process through the real front-ends over a real ServableManager
serving the tiny model (``classifier.cc``, ``regressor.cc`` and
``multi_inference.cc`` call ``RecordRequestExampleCount`` with the number of
tf.Examples; Predict never does).
"""
from __future__ import annotations

import grpc
import httpx
import numpy as np
import pytest
from tensorflow_serving.apis import (
    classification_pb2,
    inference_pb2,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from serving import codec
from tests.support.serving import examples_input

ROWS = [{"x": [1.0, 2.0, 3.0]}, {"x": [0.0, 0.0, 1.0]}, {"x": [1.0, 1.0, 1.0]}]


@pytest.fixture
def stub(grpc_frontend) -> prediction_service_pb2_grpc.PredictionServiceStub:
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_frontend.bound_ports[0]}")
    yield prediction_service_pb2_grpc.PredictionServiceStub(channel)
    channel.close()


def example_counts(metrics) -> tuple[float, float, float]:
    """(requests observed, examples observed, the _total counter) for model ``tiny``."""
    get = metrics.registry.get_sample_value
    return (get(":tensorflow:serving:request_example_counts_count", {"model": "tiny"}) or 0.0,
            get(":tensorflow:serving:request_example_counts_sum", {"model": "tiny"}) or 0.0,
            get(":tensorflow:serving:request_example_count_total", {"model": "tiny"}) or 0.0)


def test_a_grpc_classify_records_its_examples(stub, metrics):
    request = classification_pb2.ClassificationRequest(input=examples_input(ROWS))
    request.model_spec.name, request.model_spec.signature_name = "tiny", "classification"
    stub.Classify(request, timeout=30)
    assert example_counts(metrics) == (1, 3, 3)
    bucket = metrics.registry.get_sample_value(":tensorflow:serving:request_example_counts_bucket",
                                               {"model": "tiny", "le": "4"})
    assert bucket == 1   # 3 lands in the bucket below 4, as TF's Histogram::Add puts it


def test_a_grpc_regress_and_a_multi_inference_record_theirs(stub, metrics):
    request = regression_pb2.RegressionRequest(input=examples_input(ROWS[:2]))
    request.model_spec.name, request.model_spec.signature_name = "tiny", "regression"
    stub.Regress(request, timeout=30)
    multi = inference_pb2.MultiInferenceRequest(input=examples_input(ROWS))
    for signature, method in (("classification", "classify"), ("regression", "regress")):
        task = multi.tasks.add(method_name=f"tensorflow/serving/{method}")
        task.model_spec.name, task.model_spec.signature_name = "tiny", signature
    stub.MultiInference(multi, timeout=30)
    assert example_counts(metrics) == (2, 5, 5)   # one MultiInference counts its examples once


def test_rest_classify_records_and_predict_and_failures_do_not(stub, rest_url, metrics):
    predict = predict_pb2.PredictRequest()
    predict.model_spec.name = "tiny"
    codec.ndarray_to_tensor_proto(np.ones((4, 3), np.float32), predict.inputs["x"])
    stub.Predict(predict, timeout=30)
    failing = classification_pb2.ClassificationRequest(input=examples_input(ROWS))
    failing.model_spec.name, failing.model_spec.signature_name = "tiny", "serving_default"
    with pytest.raises(grpc.RpcError):
        stub.Classify(failing, timeout=30)
    assert example_counts(metrics) == (0, 0, 0)
    response = httpx.post(f"{rest_url}/v1/models/tiny:classify", timeout=30,
                          json={"signature_name": "classification", "examples": ROWS[:1]})
    assert response.status_code == 200, response.text
    assert example_counts(metrics) == (1, 1, 1)
