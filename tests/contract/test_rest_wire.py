"""The REST wire exactly: routes, JSON shapes, headers, error bodies and statuses (api_rest.md)."""
from __future__ import annotations

import base64

import numpy as np
import pytest

from tests.support.contract import layout
from tests.support.contract.helpers import manifest, text


def _error(response, http_status: int) -> str:
    assert response.status_code == http_status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert list(body) == ["error"]
    return body["error"]


def test_status_json_is_get_model_status_response(rest):
    response = rest.get("/v1/models/digits")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {"model_version_status": [
        {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}]}


def test_status_routes_by_version_and_label(rest):
    assert [v["version"] for v in rest.get("/v1/models/digits_versions").json()["model_version_status"]] == ["2", "1"]
    one = rest.get("/v1/models/digits_versions/versions/1").json()["model_version_status"]
    assert [v["version"] for v in one] == ["1"]
    # GetModelStatus ignores a label: every version is listed.
    labelled = rest.get("/v1/models/digits_versions/labels/stable").json()["model_version_status"]
    assert [v["version"] for v in labelled] == ["2", "1"]


def test_metadata_json_shape(rest):
    body = rest.get("/v1/models/digits/metadata").json()
    assert body["model_spec"] == {"name": "digits", "signature_name": "", "version": "1"}
    signature = body["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert signature["method_name"] == "tensorflow/serving/predict"
    images = signature["inputs"]["images"]
    assert images["dtype"] == "DT_FLOAT"
    assert [d["size"] for d in images["tensor_shape"]["dim"]] == ["-1", "8", "8", "1"]
    labelled = rest.get("/v1/models/digits_versions/labels/canary/metadata").json()
    assert labelled["model_spec"]["version"] == "2"


def test_row_format_answers_predictions_one_object_per_row(rest, endpoint):
    man = manifest(endpoint.repo, "digits")
    images = man.golden_inputs()["images"][:2]
    response = rest.post("/v1/models/digits:predict", json={"instances": images.tolist()})
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    assert len(predictions) == 2 and set(predictions[0]) == {"classes", "probabilities"}
    np.testing.assert_allclose(predictions[1]["probabilities"], man.golden_outputs()["probabilities"][1],
                               rtol=1e-4, atol=1e-5)


def test_single_output_row_format_omits_the_output_name(rest, endpoint):
    images = manifest(endpoint.repo, "digits").golden_inputs("logits")["images"][:3]
    body = rest.post("/v1/models/digits:predict",
                     json={"signature_name": "logits", "instances": images.tolist()}).json()
    assert np.asarray(body["predictions"]).shape == (3, 10)


def test_columnar_format_answers_outputs(rest, endpoint):
    man = manifest(endpoint.repo, "ranker")
    inputs = man.sample_inputs(batch_size=4)
    body = rest.post("/v1/models/ranker:predict",
                     json={"inputs": {k: v.tolist() for k, v in inputs.items()}}).json()
    assert set(body["outputs"]) == {"score", "user_embedding", "probability"}
    assert np.asarray(body["outputs"]["user_embedding"]).shape == (4, 8)


def test_b64_strings_are_accepted_for_string_inputs(rest, endpoint):
    man = manifest(endpoint.repo, "text")
    sentences = man.golden_inputs()["text"][:2]
    instances = [{"b64": base64.b64encode(bytes(s)).decode()} for s in sentences]
    body = rest.post("/v1/models/text:predict", json={"instances": instances})
    assert body.status_code == 200, body.text
    labels = [p["label"] for p in body.json()["predictions"]]
    assert list(text(labels)) == list(text(man.golden_outputs()["label"][:2]))


def test_routes_are_case_insensitive_but_verbs_and_subresources_are_not(rest, endpoint):
    """http_rest_api_util.cc's regexes are (?i); http_rest_api_handler.cc compares the verb and "metadata"
    case-sensitively: ":PREDICT" is malformed and "/Metadata" asks for the model's status."""
    images = manifest(endpoint.repo, "digits").sample_inputs()["images"]
    assert rest.post("/V1/MODELS/digits/VERSIONS/1:predict", json={"instances": images.tolist()}).status_code == 200
    refused = rest.post("/v1/models/digits:PREDICT", json={"instances": images.tolist()})
    assert refused.status_code == 400 and refused.json()["error"].startswith("Malformed request")
    assert "model_version_status" in rest.get("/V1/Models/digits/Metadata").json()


@pytest.mark.parametrize("method, path", [
    ("POST", "/v1/models/digits"),
    ("GET", "/v1/models/digits:predict"),
    ("PUT", "/v1/models/digits"),
    ("DELETE", "/v1/models/digits"),
    ("POST", "/v1/models/digits:explain"),
    ("GET", "/v1/models/digits/versions/one"),
])
def test_bad_path_or_method_is_malformed_request_400(rest, method, path):
    assert _error(rest.request(method, path, content=b"{}"), 400) == f"Malformed request: {method} {path}"


def test_model_list_without_name_is_400_missing_model_name(rest):
    assert _error(rest.get("/v1/models"), 400) == "Missing model name in request."


def test_unknown_model_is_404_with_tf_serving_message(rest):
    message = _error(rest.post("/v1/models/nope:predict", json={"instances": [1]}), 404)
    assert message == "Servable not found for request: Latest(nope)"
    assert _error(rest.get("/v1/models/nope"), 404) == "Could not find any versions of model nope"


def test_unknown_version_is_404_with_tf_serving_message(rest):
    message = _error(rest.post("/v1/models/digits/versions/42:predict", json={"instances": [1]}), 404)
    assert message == "Servable not found for request: Specific(digits, 42)"


def test_unknown_label_is_400_with_tf_serving_message(rest):
    message = _error(rest.post("/v1/models/digits_versions/labels/beta:predict", json={"instances": [1]}), 400)
    assert message == "Unrecognized servable version label: beta"


def test_unknown_signature_is_400_with_tf_serving_message(rest):
    message = _error(rest.post("/v1/models/digits:predict", json={"signature_name": "x", "instances": [1]}), 400)
    assert message == 'Serving signature name: "x" not found in signature def'


@pytest.mark.parametrize("body", [
    b"{not json", b'{"instances": [1, 2', b"[]", b'"text"', b"",
    b'{"instances": [[1.0]], "inputs": {"images": [[1.0]]}}',
    b'{"instances": []}', b'{"nothing": 1}',
    b'{"instances": [[[[1.0]]], [[[1.0], [2.0]]]]}',            # ragged
    b'{"instances": [[[["a"]]]]}',                              # wrong dtype
    b'{"inputs": {"pixels": [[[[1.0]]]]}}',                     # unknown input
])
def test_bad_predict_bodies_are_400_with_an_error_message(rest, body):
    assert _error(rest.post("/v1/models/digits:predict", content=body), 400)


def test_both_inputs_and_instances_gets_tf_servings_message(rest):
    message = _error(rest.post("/v1/models/digits:predict", json={"instances": [1], "inputs": [1]}), 400)
    assert "Not formatted correctly expecting only one of 'inputs' or 'instances' keys to exist" in message


def test_classify_and_regress_answer_results(rest, endpoint):
    from tests.support.contract.helpers import examples_from_serialized

    man = manifest(endpoint.repo, "text")
    examples = examples_from_serialized(man.golden_inputs("classification")["inputs"][:2])
    examples = [{k: v.decode() for k, v in e.items()} for e in examples]
    results = rest.post("/v1/models/text:classify",
                        json={"signature_name": "classification", "examples": examples}).json()["results"]
    assert len(results) == 2 and all(len(pair) == 2 for pair in results[0])
    man = manifest(endpoint.repo, "ranker")
    examples = examples_from_serialized(man.golden_inputs("regression")["inputs"][:3])
    body = rest.post("/v1/models/ranker:regress", json={"signature_name": "regression", "examples": examples})
    assert len(body.json()["results"]) == 3


def test_classify_without_examples_is_400(rest):
    message = _error(rest.post("/v1/models/text:classify", json={"signature_name": "classification"}), 400)
    assert "'examples'" in message


def test_prometheus_page_is_served_as_text_plain_at_the_monitoring_path(rest):
    rest.get("/v1/models/digits")
    response = rest.get(layout.MONITORING_PATH)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert ":tensorflow:serving:request_count" in response.text
