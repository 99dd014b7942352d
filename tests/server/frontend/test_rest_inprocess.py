"""The REST front-end in process over the data plane, driven with httpx: TF Serving's JSON in and out."""
from __future__ import annotations

import logging
from typing import Iterator

import grpc
import httpx
import numpy as np
import pytest
from google.protobuf import json_format
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    prediction_service_pb2_grpc,
)

from serving import codec
from tests.support.serving import MONITORING_PATH

EXAMPLES = [{"x": [1.0, 2.0, 3.0]}, {"x": [0.0, 0.0, 1.0]}]


@pytest.fixture
def http(rest_url) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=rest_url, timeout=30) as client:
        yield client


def error_of(response: httpx.Response, http_status: int) -> str:
    assert response.status_code == http_status, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()["error"]


def test_predict_row_and_columnar_formats(http):
    rows = http.post("/v1/models/tiny:predict", json={"instances": [[1.0, 2.0, 3.0]]})
    assert rows.status_code == 200 and rows.json() == {"predictions": [{"y": [2.0, 4.0, 6.0], "total": 12.0}]}
    columns = http.post("/v1/models/tiny/versions/1:predict", json={"inputs": {"x": [[1.0, 2.0, 3.0]]}})
    assert columns.json() == {"outputs": {"y": [[2.0, 4.0, 6.0]], "total": [12.0]}}
    strings = http.post("/v1/models/tiny:predict", json={"signature_name": "strings", "instances": ["ab", "xyz"]})
    assert strings.json() == {"predictions": [{"length": 2, "upper": "AB"}, {"length": 3, "upper": "XYZ"}]}
    one_output = http.post("/v1/models/tiny:predict", json={"signature_name": "sleep", "instances": [0.0, 0.0]})
    assert one_output.json() == {"predictions": [0.0, 0.0]}  # a signature's only output: its bare values


def test_large_tensors_answer_alike_in_row_and_columnar_bodies(http):
    x = np.random.default_rng(0).standard_normal((300, 3)).astype(np.float32)  # ~10 kB: parsed without lists
    for body in (codec.inputs_to_rest_request(x), codec.inputs_to_rest_request({"x": x}),
                 codec.inputs_to_rest_request(x, row_format=False)):
        answer = http.post("/v1/models/tiny:predict", content=body)
        assert answer.status_code == 200, answer.text
        outputs = codec.rest_response_to_outputs(answer.content, output_dtypes={"y": np.float32,
                                                                               "total": np.float32})
        np.testing.assert_array_equal(outputs["y"], 2 * x)


def test_a_row_of_another_size_is_tf_servings_size_error_before_any_shape_error(http):
    rows = [[1.0, 2.0, 3.0]] * 300 + [[1.0, 2.0], [[1.0, 2.0, 3.0]]]
    assert error_of(http.post("/v1/models/tiny:predict", json={"instances": rows}), 400) == (
        "Failed to process element: 300 of 'instances' list. Error: INVALID_ARGUMENT: "
        "Expecting tensor size: 3 but got: 2")
    assert error_of(http.post("/v1/models/tiny:predict", json={"instances": [[1.0, 2.0, 3.0], [[1.0], [2.0], [3.0]]]}),
                    400) == ("Failed to process element: 1 of 'instances' list. Error: INVALID_ARGUMENT: "
                             "Expecting shape [3] but got: [3,1]")


def test_classify_and_regress_answer_results(http):
    classified = http.post("/v1/models/tiny:classify", json={"signature_name": "classification",
                                                              "examples": EXAMPLES})
    assert classified.status_code == 200, classified.text
    results = classified.json()["results"]
    assert [[label for label, _ in row] for row in results] == [["low", "high"]] * 2
    assert results[0][1][1] > 0.99
    regressed = http.post("/v1/models/tiny:regress", json={"signature_name": "regression", "examples": EXAMPLES})
    assert regressed.json() == {"results": [12.0, 2.0]}


def test_status_and_metadata_json(http):
    assert http.get("/v1/models/tiny").json() == {"model_version_status": [
        {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}]}
    metadata = http.get("/v1/models/tiny/metadata").json()
    assert metadata["model_spec"] == {"name": "tiny", "version": "1", "signature_name": ""}
    signature = metadata["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert signature["method_name"] == "tensorflow/serving/predict"
    assert signature["inputs"]["x"]["dtype"] == "DT_FLOAT"


def test_status_and_metadata_are_what_grpc_answers_in_proto_json(http, grpc_frontend):
    with grpc.insecure_channel(f"127.0.0.1:{grpc_frontend.bound_ports[0]}") as channel:
        status_request = get_model_status_pb2.GetModelStatusRequest()
        status_request.model_spec.name = "tiny"
        status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(status_request, timeout=30)
        metadata_request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        metadata_request.model_spec.name = "tiny"
        metadata = prediction_service_pb2_grpc.PredictionServiceStub(channel).GetModelMetadata(
            metadata_request, timeout=30)
    signature_map = get_model_metadata_pb2.SignatureDefMap()
    metadata.metadata["signature_def"].Unpack(signature_map)

    def proto_json(message, field_names=True):
        return json_format.MessageToDict(message, including_default_value_fields=True,
                                         preserving_proto_field_name=field_names)

    assert http.get("/v1/models/tiny").json() == proto_json(status, field_names=False)
    assert http.get("/v1/models/tiny/metadata").json() == {
        "model_spec": proto_json(metadata.model_spec), "metadata": {"signature_def": proto_json(signature_map)}}


def test_errors_are_tf_servings_statuses_and_messages(http):
    assert error_of(http.post("/v1/models/nope:predict", json={"instances": [[1.0, 2.0, 3.0]]}),
                    404) == "Servable not found for request: Latest(nope)"
    assert error_of(http.post("/v1/models/tiny:predict", json={"signature_name": "nope", "instances": [[1.0]]}),
                    400) == 'Serving signature name: "nope" not found in signature def'
    assert error_of(http.post("/v1/models/tiny:predict", content=b"[1]"), 400) == "JSON Value: [1] Is not object"
    assert error_of(http.get("/v1/models/tiny/versions/3"), 404) == "Could not find version 3 of model tiny"
    assert error_of(http.post("/v1/models/tiny:regress", json={"signature_name": "regression", "examples": []}),
                    400).endswith("'examples' value is an empty array")
    assert error_of(http.get("/v1/models/tiny:predict"), 400) == "Malformed request: GET /v1/models/tiny:predict"


def test_the_json_document_is_checked_before_the_model_is_looked_up(http):
    assert error_of(http.post("/v1/models/nope:predict", content=b"{"), 400).startswith("JSON Parse error")
    assert error_of(http.post("/v1/models/nope:predict", json={"signature_name": 1}), 400) == (
        "JSON Value: {\"signature_name\":1} not formatted correctly. 'signature_name' key must be a string value.")


def test_prometheus_page_counts_rest_requests_by_verb(http):
    http.post("/v1/models/tiny:predict", json={"instances": [[1.0, 2.0, 3.0]]})
    page = http.get(MONITORING_PATH)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
    assert ':tensorflow:serving:request_count{model_name="tiny",status="OK"} 1' in page.text
    assert ('request_latency_count{model_name="tiny",API="predict",entrypoint="REST"} 1') in page.text


def test_a_grpc_call_on_the_rest_port_is_one_warning_line_and_a_400(rest_url, caplog):
    caplog.set_level(logging.DEBUG, logger="serving.server.frontends.rest_connection")
    with grpc.insecure_channel(rest_url.removeprefix("http://")) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            channel.unary_unary("/tensorflow.serving.PredictionService/GetModelMetadata")(b"", timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE and "HTTP status 400" in refused.value.details()
    records = [r for r in caplog.records if r.name == "serving.server.frontends.rest_connection"]
    assert [(r.levelname, r.exc_info) for r in records] == [("WARNING", None)] * len(records) and records
    assert records[0].getMessage().startswith("An HTTP/2 connection (a gRPC client?) reached the REST port")
