"""TF Serving's ``model_servers/get_model_status_impl_test.cc`` (2.17.1), ported over gRPC GetModelStatus.

The model with two versions is ``tfs_testdata``'s ``two_versions`` (``saved_model_half_plus_two_2_versions``,
policy ``all``: versions 123 and 124).
"""
from __future__ import annotations

import grpc
import pytest
from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

from tests.support.contract.tfs_grpc import RPC_TIMEOUT, code_and_details

MODEL = "two_versions"


@pytest.fixture
def status(tfs_channel):
    stub = model_service_pb2_grpc.ModelServiceStub(tfs_channel)
    return lambda request: stub.GetModelStatus(request, timeout=RPC_TIMEOUT)


def request_for(name: str, version: int | None = None) -> get_model_status_pb2.GetModelStatusRequest:
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = name
    if version is not None:
        request.model_spec.version.value = version
    return request


def test_missing_or_empty_model_spec_failure(status):
    """MissingOrEmptyModelSpecFailure: INVALID_ARGUMENT "Missing ModelSpec"."""
    assert code_and_details(lambda: status(get_model_status_pb2.GetModelStatusRequest())) == (
        grpc.StatusCode.INVALID_ARGUMENT, "Missing ModelSpec")


def test_invalid_model_name_failure(status):
    """InvalidModelNameFailure: NOT_FOUND for nonexistent_model."""
    assert code_and_details(lambda: status(request_for("nonexistent_model")))[0] is grpc.StatusCode.NOT_FOUND


def test_invalid_model_version_failure(status):
    """InvalidModelVersionFailure: NOT_FOUND for version 125."""
    assert code_and_details(lambda: status(request_for(MODEL, 125)))[0] is grpc.StatusCode.NOT_FOUND


def test_all_versions_success(status):
    """AllVersionsSuccess: versions 123 and 124, each OK with an empty message."""
    response = status(request_for(MODEL))
    assert {v.version for v in response.model_version_status} == {123, 124}
    assert all((v.status.error_code, v.status.error_message) == (0, "") for v in response.model_version_status)


def test_single_version_success(status):
    """SingleVersionSuccess: version 123 alone."""
    response = status(request_for(MODEL, 123))
    assert [(v.version, v.status.error_code, v.status.error_message) for v in response.model_version_status] == [
        (123, 0, "")]
