"""TF Serving's ``model_servers/http_rest_api_handler_test.cc`` (2.17.1), ported case by case.

Each test drives the REST port of a server of TF Serving's test models
(``tfs_testdata``: ``saved_model_half_plus_two_2_versions``, version 123,
label ``Version_Label``) with the test's request and checks its status,
message and body. Where TF Serving's test calls the handler directly, the HTTP
status is ``http_server.cc``'s mapping of the returned status.
"""
from __future__ import annotations

import pytest

from tests.support.contract.tfs_expect import TWO_VERSIONS_SIGNATURES, metadata_json, version_status_json
from tests.support.contract.tfs_testdata import REST_HANDLER_MODEL as MODEL, VERSION, VERSION_LABEL

UINT64_MAX = 2**64 - 1


def error_of(response, http_status: int) -> str:
    assert response.status_code == http_status, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.json()["error"]


def json_of(response) -> object:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()


def test_only_v1_paths_reach_the_handler(tfs_rest):
    """kPathRegex: "/v1/models" matches the handler's path regex; "/statuspage" and "/index" do not."""
    assert tfs_rest.get("/v1/models").status_code == 400       # the handler's "Missing model name"
    for path in ("/statuspage", "/index"):
        assert tfs_rest.get(path).status_code == 404


@pytest.mark.parametrize("method, path, message", [
    ("GET", "/v1/foo", "Malformed request"),
    ("POST", "/v1/foo", "Malformed request"),
    ("GET", "/v1/models", "Missing model name"),
    ("GET", "/v1/models/debug/model_name", "Malformed request"),
    ("POST", "/v1/models", "Malformed request"),
    ("GET", "/v1/models/foo:predict", "Malformed request"),
    ("GET", "/v1/models/foo/version/50:predict", "Malformed request"),
    ("POST", "/v1/models/foo/version/50:regress", "Malformed request"),
    ("POST", "/v1/models/foo/versions/HELLO:regress", "Malformed request"),
    ("POST", "/v1/models/foo/metadata", "Malformed request"),
    ("POST", "/v1/models/foo/label/some_label:regress", "Malformed request"),
    ("POST", "/v1/models/foo/versions/50/labels/some_label:regress", "Malformed request"),
    ("POST", "/v1/models/foo/versions/some_label:regress", "Malformed request"),
])
def test_unsupported_api_calls(tfs_rest, method, path, message):
    """UnsupportedApiCalls: INVALID_ARGUMENT (400) with the message TF Serving gives."""
    assert message in error_of(tfs_rest.request(method, path, content=b""), 400)


def test_unsupported_api_calls_version_beyond_uint64(tfs_rest):
    """UnsupportedApiCalls: a version of UINT64_MAX is "Failed to convert version", returned by
    ParseModelInfo before the handler writes an error document, so the body is empty."""
    response = tfs_rest.post(f"/v1/models/foo/versions/{UINT64_MAX}:regress", content=b"")
    assert (response.status_code, response.content) == (400, b"")


@pytest.mark.parametrize("path", [
    "/v1/models/foo:predict", "/v1/models/foo/versions/50:predict", f"/v1/models/{MODEL}99:predict"])
def test_predict_model_name_version_errors(tfs_rest, path):
    """PredictModelNameVersionErrors: an unknown model (or version) is NOT_FOUND (404)."""
    error_of(tfs_rest.post(path, content=b'{ "instances": [1] }'), 404)


@pytest.mark.parametrize("path, body, message", [
    (f"/v1/models/{MODEL}:predict", b"", "JSON Parse error: The document is empty"),
    (f"/v1/models/{MODEL}:predict", b"instances = [1, 2]", "JSON Parse error: Invalid value"),
    (f"/v1/models/{MODEL}:predict", b'{ "instances": ["x", "y"] }', "not of expected type: float"),
    (f"/v1/models/{MODEL}/labels/Version_Nonexistent:predict", b'{ "instances": ["x", "y"] }',
     "Unrecognized servable version label"),
    (f"/v1/models/{MODEL}:predict", b'{ "signature_name": 100 }', "'signature_name' key must be a string value."),
])
def test_predict_request_errors(tfs_rest, path, body, message):
    """PredictRequestErrors: each is INVALID_ARGUMENT (400) with TF Serving's message."""
    assert message in error_of(tfs_rest.post(path, content=body), 400)


@pytest.mark.parametrize("path, body, expected", [
    (f"/v1/models/{MODEL}:predict", b'{"instances": [[1.0, 2.0], [3.0, 4.0]]}',
     {"predictions": [[2.5, 3.0], [3.5, 4.0]]}),
    (f"/v1/models/{MODEL}/versions/{VERSION}:predict", b'{"instances": [1.0, 2.0]}', {"predictions": [2.5, 3.0]}),
    (f"/v1/models/{MODEL}/labels/{VERSION_LABEL}:predict", b'{"instances": [1.0, 2.0]}',
     {"predictions": [2.5, 3.0]}),
    (f"/v1/models/{MODEL}/versions/{VERSION}:predict",
     b'{"signature_name": "serving_default", "instances": [3.0, 4.0]}', {"predictions": [3.5, 4.0]}),
    (f"/v1/models/{MODEL}/versions/{VERSION}:predict",
     b'{"signature_name": "serving_default", "inputs": [3.0, 4.0]}', {"outputs": [3.5, 4.0]}),
])
def test_predict(tfs_rest, path, body, expected):
    """Predict: latest, a version, a label, an explicit signature, columnar inputs. The [-1,1] input
    takes [[1.0, 2.0], [3.0, 4.0]] and [1.0, 2.0]: TF Serving feeds shapes to the graph unchecked."""
    assert json_of(tfs_rest.post(path, content=body)) == expected


@pytest.mark.parametrize("path", [
    f"/v1/models/{MODEL}:regress", f"/v1/models/{MODEL}/versions/{VERSION}:regress",
    f"/v1/models/{MODEL}/labels/{VERSION_LABEL}:regress"])
def test_regress(tfs_rest, path):
    """Regress: regress_x_to_y on x=80 is 42, by latest, version and label."""
    body = b'{"signature_name": "regress_x_to_y", "examples": [ { "x": 80.0 } ] }'
    assert json_of(tfs_rest.post(path, content=body)) == {"results": [42]}


@pytest.mark.parametrize("path, x, score", [
    (f"/v1/models/{MODEL}:classify", 20.0, 12), (f"/v1/models/{MODEL}/labels/{VERSION_LABEL}:classify", 10.0, 7)])
def test_classify(tfs_rest, path, x, score):
    """Classify: classify_x_to_y scores 0.5x+2 with an empty label."""
    body = f'{{"signature_name": "classify_x_to_y", "examples": [ {{ "x": {x} }} ] }}'.encode()
    assert json_of(tfs_rest.post(path, content=body)) == {"results": [[["", score]]]}


@pytest.mark.parametrize("path", [
    f"/v1/models/{MODEL}", f"/v1/models/{MODEL}/versions/{VERSION}", f"/v1/models/{MODEL}/labels/{VERSION_LABEL}"])
def test_get_status(tfs_rest, path):
    """GetStatus: all versions, one version, by label: version 123 AVAILABLE."""
    assert json_of(tfs_rest.get(path)) == version_status_json(VERSION)


def test_get_model_metadata(tfs_rest):
    """GetModelMetadata: the signature map of saved_model_half_plus_two_2_versions, version 123."""
    assert json_of(tfs_rest.get(f"/v1/models/{MODEL}/metadata")) == metadata_json(
        MODEL, VERSION, TWO_VERSIONS_SIGNATURES)
