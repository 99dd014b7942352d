"""TF Serving's ``servables/tensorflow/multi_inference_helper_test.cc`` (2.17.1), ported over gRPC MultiInference.

The typed suite runs twice, as TF Serving's does: ``tf1`` is ``tfs_testdata``'s ``test_model``
(``saved_model_half_plus_two_2_versions``, version 123); ``tf2`` a server of its own (``slow``) whose
``test_model`` is ``saved_model_half_plus_two_tf2_cpu`` (the export script's native TF2 model), version 123.
"""
from __future__ import annotations

import grpc
import pytest
from tensorflow_serving.apis import inference_pb2, prediction_service_pb2_grpc

from tests.support.contract.tfs_grpc import RPC_TIMEOUT, add_example, code_and_details, populate_task
from tests.support.half_plus_two import half_plus_two_model
from tests.support.servers import EmbeddedServer

MODEL, VERSION = "test_model", 123
REGRESS, CLASSIFY, PREDICT = "tensorflow/serving/regress", "tensorflow/serving/classify", "tensorflow/serving/predict"


@pytest.fixture(scope="module")
def tf2_channel(tmp_path_factory):
    root = tmp_path_factory.mktemp("multi-inference-tf2")
    model = half_plus_two_model("half_plus_two_tf2", root / "saved_model_half_plus_two_tf2_cpu" / f"{VERSION:08d}")
    with EmbeddedServer([f"--model_name={MODEL}", f"--model_base_path={model.parent}"], wait_for=[MODEL],
                        log_path=root / "server.log") as server, grpc.insecure_channel(server.grpc_target) as channel:
        yield channel


@pytest.fixture(params=["tf1", pytest.param("tf2", marks=pytest.mark.slow)])
def multi(request, tfs_channel):
    """MultiInferenceTest's ``T``: the TF1 or the TF2 half_plus_two as ``test_model``."""
    channel = tfs_channel
    if request.param == "tf2":
        if request.node.callspec.params.get("tfs_testdata") != "server":
            pytest.skip("the TF2 variant runs on an embedded server of its own")
        channel = request.getfixturevalue("tf2_channel")
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    return lambda request: stub.MultiInference(request, timeout=RPC_TIMEOUT)


def request_with_x(x: float = 2.0) -> inference_pb2.MultiInferenceRequest:
    request = inference_pb2.MultiInferenceRequest()
    add_example(request.input, x=x)
    return request


def test_missing_input(multi):
    """MissingInputTest: INVALID_ARGUMENT "Input is empty"."""
    request = inference_pb2.MultiInferenceRequest()
    populate_task(request, MODEL, "regress_x_to_y", REGRESS)
    code, details = code_and_details(lambda: multi(request))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "Input is empty" in details


def test_undefined_signature(multi):
    """UndefinedSignatureTest: INVALID_ARGUMENT "signature not found"."""
    request = request_with_x()
    populate_task(request, MODEL, "ThisSignatureDoesNotExist", REGRESS)
    code, details = code_and_details(lambda: multi(request))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "signature not found" in details


def test_inconsistent_model_specs_in_request(multi):
    """InconsistentModelSpecsInRequestTest: INVALID_ARGUMENT "must access the same model name"."""
    request = request_with_x()
    populate_task(request, MODEL, "regress_x_to_y", REGRESS)
    populate_task(request, "ModelDoesNotExist", "regress_x_to_y", REGRESS)
    code, details = code_and_details(lambda: multi(request))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "must access the same model name" in details


def test_evaluate_duplicate_signatures(multi):
    """EvaluateDuplicateSignaturesTest: INVALID_ARGUMENT "Duplicate evaluation of signature: regress_x_to_y"."""
    request = request_with_x()
    populate_task(request, MODEL, "regress_x_to_y", REGRESS)
    populate_task(request, MODEL, "regress_x_to_y", REGRESS)
    code, details = code_and_details(lambda: multi(request))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "Duplicate evaluation of signature: regress_x_to_y" in details


def test_unsupported_signature_type(multi):
    """UsupportedSignatureTypeTest: a predict task is UNIMPLEMENTED "Unsupported signature"."""
    request = request_with_x()
    populate_task(request, MODEL, "serving_default", PREDICT)
    code, details = code_and_details(lambda: multi(request))
    assert code is grpc.StatusCode.UNIMPLEMENTED and "Unsupported signature" in details


def expected_result(response: inference_pb2.MultiInferenceResponse, signature_name: str, value: float,
                    classify: bool = False) -> None:
    result = response.results.add()
    result.model_spec.name, result.model_spec.signature_name = MODEL, signature_name
    result.model_spec.version.value = VERSION
    if classify:
        result.classification_result.classifications.add().classes.add(score=value)
    else:
        result.regression_result.regressions.add(value=value)


@pytest.mark.parametrize("tasks", [
    [("regress_x_to_y", REGRESS, 3.0)],                                   # ValidSingleSignatureTest
    [("regress_x_to_y", REGRESS, 3.0), ("regress_x_to_y2", REGRESS, 4.0)],  # MultipleValidRegressSignaturesTest
    [("regress_x_to_y", REGRESS, 3.0), ("classify_x_to_y", CLASSIFY, 3.0)],  # RegressAndClassifySignaturesTest
])
def test_valid_signatures(multi, tasks):
    """ValidSingleSignatureTest, MultipleValidRegressSignaturesTest, RegressAndClassifySignaturesTest:
    x=2 gives 3 (y) and 4 (y2); each result names the model, version 123 and its signature."""
    request, expected = request_with_x(), inference_pb2.MultiInferenceResponse()
    for signature_name, method, value in tasks:
        populate_task(request, MODEL, signature_name, method, VERSION)
        expected_result(expected, signature_name, value, classify=method == CLASSIFY)
    assert multi(request) == expected


def test_model_spec_override(multi):
    """ModelSpecOverride (over the wire: the first task's spec): test_model is found, nonexistent_model is
    NOT_FOUND."""
    request = request_with_x()
    populate_task(request, MODEL, "regress_x_to_y", REGRESS, VERSION)
    assert code_and_details(lambda: multi(request))[0] is not grpc.StatusCode.NOT_FOUND
    request.tasks[0].model_spec.name = "nonexistent_model"
    assert code_and_details(lambda: multi(request))[0] is grpc.StatusCode.NOT_FOUND


def test_no_tasks_is_model_spec_has_no_name(multi):
    """multi_inference_helper.cc GetModelSpecFromRequest: no task, so an empty ModelSpec, so
    ServerCore's INVALID_ARGUMENT "ModelSpec has no name specified."."""
    assert code_and_details(lambda: multi(request_with_x())) == (
        grpc.StatusCode.INVALID_ARGUMENT, "ModelSpec has no name specified.")
