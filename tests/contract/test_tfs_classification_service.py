"""TF Serving's ``servables/tensorflow/classification_service_test.cc`` (2.17.1), ported over gRPC Classify.

``test_model`` is ``tfs_testdata``'s (``saved_model_half_plus_two_2_versions``, version 123).
"""
from __future__ import annotations

import grpc
import pytest
from tensorflow_serving.apis import classification_pb2, prediction_service_pb2_grpc

from tests.support.contract.tfs_grpc import RPC_TIMEOUT, code_and_details

MODEL = "test_model"


@pytest.fixture
def classify(tfs_channel):
    stub = prediction_service_pb2_grpc.PredictionServiceStub(tfs_channel)
    return lambda request: stub.Classify(request, timeout=RPC_TIMEOUT)


def test_invalid_model_spec(classify):
    """InvalidModelSpec: no ModelSpec and an empty one are INVALID_ARGUMENT; "foo" is NOT_FOUND."""
    request = classification_pb2.ClassificationRequest()
    assert code_and_details(lambda: classify(request)) == (grpc.StatusCode.INVALID_ARGUMENT, "Missing ModelSpec")
    request.model_spec.SetInParent()
    assert code_and_details(lambda: classify(request)) == (
        grpc.StatusCode.INVALID_ARGUMENT, "ModelSpec has no name specified.")
    request.model_spec.name = "foo"
    assert code_and_details(lambda: classify(request))[0] is grpc.StatusCode.NOT_FOUND


def test_invalid_signature(classify):
    """InvalidSignature: an unknown signature name is INVALID_ARGUMENT."""
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name, request.model_spec.signature_name = MODEL, "invalid_signature_name"
    assert code_and_details(lambda: classify(request))[0] is grpc.StatusCode.INVALID_ARGUMENT


def test_classification_success(classify):
    """ClassificationSuccess: x=80 (plus unused locale and age features) scores 42; version 123."""
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name, request.model_spec.signature_name = MODEL, "classify_x_to_y"
    features = request.input.example_list.examples.add().features.feature
    features["x"].float_list.value.append(80.0)
    features["locale"].bytes_list.value.append(b"pt_BR")
    features["age"].float_list.value.append(19.0)
    response = classify(request)
    expected = classification_pb2.ClassificationResponse()
    expected.result.classifications.add().classes.add(score=42)
    expected.model_spec.name, expected.model_spec.signature_name = MODEL, "classify_x_to_y"
    expected.model_spec.version.value = 123
    assert response == expected


def test_model_spec_override(classify):
    """ModelSpecOverride (the override is the C++ API's; over the wire, the request's own spec): the
    request's test_model is found (not NOT_FOUND), nonexistent_model is NOT_FOUND."""
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name = MODEL
    assert code_and_details(lambda: classify(request))[0] is not grpc.StatusCode.NOT_FOUND
    request.model_spec.name = "nonexistent_model"
    assert code_and_details(lambda: classify(request))[0] is grpc.StatusCode.NOT_FOUND
