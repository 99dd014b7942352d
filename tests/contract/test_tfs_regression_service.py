"""TF Serving's ``servables/tensorflow/regression_service_test.cc`` (2.17.1), ported over gRPC Regress.

``test_model`` is ``tfs_testdata``'s (``saved_model_half_plus_two_2_versions``, version 123).
"""
from __future__ import annotations

import grpc
import pytest
from tensorflow_serving.apis import prediction_service_pb2_grpc, regression_pb2

from tests.support.contract.tfs_grpc import RPC_TIMEOUT, code_and_details

MODEL = "test_model"


@pytest.fixture
def regress(tfs_channel):
    stub = prediction_service_pb2_grpc.PredictionServiceStub(tfs_channel)
    return lambda request: stub.Regress(request, timeout=RPC_TIMEOUT)


def test_invalid_model_spec(regress):
    """InvalidModelSpec: no ModelSpec and an empty one are INVALID_ARGUMENT; "foo" is NOT_FOUND."""
    request = regression_pb2.RegressionRequest()
    assert code_and_details(lambda: regress(request)) == (grpc.StatusCode.INVALID_ARGUMENT, "Missing ModelSpec")
    request.model_spec.SetInParent()
    assert code_and_details(lambda: regress(request)) == (
        grpc.StatusCode.INVALID_ARGUMENT, "ModelSpec has no name specified.")
    request.model_spec.name = "foo"
    assert code_and_details(lambda: regress(request))[0] is grpc.StatusCode.NOT_FOUND


def test_invalid_signature(regress):
    """InvalidSignature: an unknown signature name is INVALID_ARGUMENT."""
    request = regression_pb2.RegressionRequest()
    request.model_spec.name, request.model_spec.signature_name = MODEL, "invalid_signature_name"
    assert code_and_details(lambda: regress(request))[0] is grpc.StatusCode.INVALID_ARGUMENT


def test_regression_success(regress):
    """RegressionSuccess: x=80 (plus unused locale and age features) regresses to 42; version 123."""
    request = regression_pb2.RegressionRequest()
    request.model_spec.name, request.model_spec.signature_name = MODEL, "regress_x_to_y"
    features = request.input.example_list.examples.add().features.feature
    features["x"].float_list.value.append(80.0)
    features["locale"].bytes_list.value.append(b"pt_BR")
    features["age"].float_list.value.append(19.0)
    response = regress(request)
    expected = regression_pb2.RegressionResponse()
    expected.result.regressions.add(value=42)
    expected.model_spec.name, expected.model_spec.signature_name = MODEL, "regress_x_to_y"
    expected.model_spec.version.value = 123
    assert response == expected


def test_model_spec_override(regress):
    """ModelSpecOverride (the override is the C++ API's; over the wire, the request's own spec): the
    request's test_model is found (not NOT_FOUND), nonexistent_model is NOT_FOUND."""
    request = regression_pb2.RegressionRequest()
    request.model_spec.name = MODEL
    assert code_and_details(lambda: regress(request))[0] is not grpc.StatusCode.NOT_FOUND
    request.model_spec.name = "nonexistent_model"
    assert code_and_details(lambda: regress(request))[0] is grpc.StatusCode.NOT_FOUND
