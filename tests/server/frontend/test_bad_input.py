"""Bad input gets a 400 / INVALID_ARGUMENT naming the problem; the server stays up for everyone else."""
from __future__ import annotations

import gzip
import json
import re
import threading

import grpc
import httpx
import numpy as np
import pytest

from serving.server.frontends.dataplane import DataPlane, ModelSpec
from serving.server.frontends.rest import RestFrontend
from serving.launcher import free_port
from tests.support.serving import MONITORING_PATH, tiny_flags
from tests.support.servers import EmbeddedServer

BODY_LIMIT = 1024 * 1024
GOOD = {"instances": [[1.0, 2.0, 3.0]]}


@pytest.fixture(scope="module")
def server(tiny_repo):
    flags = tiny_flags(tiny_repo, f"--rest_api_max_body_bytes={BODY_LIMIT}", "--rest_api_timeout_in_ms=1500",
                       "--rest_api_enable_cors_support")
    with EmbeddedServer(flags, wait_for=["tiny"]) as running:
        yield running


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.rest_url, timeout=60) as client:
        yield client


def assert_still_serving(server: EmbeddedServer, http: httpx.Client) -> None:
    assert server.proc.poll() is None, server.log_tail()
    response = http.post("/v1/models/tiny:predict", json=GOOD)
    assert response.status_code == 200 and response.json() == {"predictions": [{"y": [2.0, 4.0, 6.0],
                                                                                "total": 12.0}]}


def error_of(response: httpx.Response, http_status: int = 400) -> str:
    assert response.status_code == http_status, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()["error"]


def test_body_over_the_limit_is_413_naming_the_limit(server, http):
    body = b'{"instances": [' + b"1.0," * (BODY_LIMIT // 4) + b"1.0]}"
    message = error_of(http.post("/v1/models/tiny:predict", content=body), 413)
    assert f"exceeds the limit of {BODY_LIMIT} bytes" in message and "--rest_api_max_body_bytes" in message
    assert_still_serving(server, http)


def test_chunked_body_over_the_limit_is_cut_off_while_streaming(server, http):
    def chunks():
        yield b'{"instances": ['
        for _ in range(BODY_LIMIT // 4096 + 2):
            yield b"1.0," * 1024
        yield b"1.0]}"

    message = error_of(http.post("/v1/models/tiny:predict", content=chunks()), 413)
    assert f"exceeds the limit of {BODY_LIMIT} bytes" in message
    assert_still_serving(server, http)


def test_gzip_body_is_inflated_as_tf_serving_does(server, http):
    body = gzip.compress(json.dumps(GOOD).encode())
    response = http.post("/v1/models/tiny:predict", content=body, headers={"Content-Encoding": "gzip"})
    assert response.status_code == 200, response.text
    assert response.json() == {"predictions": [{"y": [2.0, 4.0, 6.0], "total": 12.0}]}


def test_gzip_body_inflating_past_the_limit_is_413_naming_the_limit(server, http):
    bomb = gzip.compress(b" " * (BODY_LIMIT * 8), compresslevel=9)
    assert len(bomb) < BODY_LIMIT // 100
    message = error_of(http.post("/v1/models/tiny:predict", content=bomb, headers={"Content-Encoding": "gzip"}), 413)
    assert message == (f"Request body inflated from Content-Encoding: gzip exceeds the limit of {BODY_LIMIT} bytes "
                       "(embedded server flag --rest_api_max_body_bytes)")
    assert_still_serving(server, http)


@pytest.mark.parametrize("encoding, body, http_status, fragment", [
    ("br", b"{}", 415, "Content-Encoding: br is not supported: request bodies must be identity or gzip"),
    ("gzip, gzip", b"{}", 415, "is not supported"),
    ("gzip", b"not gzip at all", 400, "Content-Encoding: gzip body could not be inflated"),
    ("gzip", gzip.compress(b'{"instances": [[1.0, 2.0, 3.0]]}', mtime=0)[:-12], 400, "the stream ends early"),
])
def test_other_codings_are_415_and_corrupt_gzip_is_400(server, http, encoding, body, http_status, fragment):
    response = http.post("/v1/models/tiny:predict", content=body, headers={"Content-Encoding": encoding})
    assert fragment in error_of(response, http_status)
    assert_still_serving(server, http)


def test_integers_too_big_for_a_double_are_400_not_500(server, http):
    for digits in (400, 5000):
        body = b'{"instances": [[NaN, 1.0, ' + b"7" * digits + b"]]}"
        message = error_of(http.post("/v1/models/tiny:predict", content=body))
        assert message == "JSON Parse error: Number too big to be stored in double."
        message = error_of(http.post("/v1/models/tiny:predict", content=b'{"instances": [' + b"7" * digits + b"]}"))
        assert message.startswith("JSON Parse error")
    assert_still_serving(server, http)


def test_a_version_of_thousands_of_digits_is_400_not_500(server, http):
    digits = "9" * 5000
    # TF Serving's ParseModelInfo fails before an error document is written: 400 with an empty body.
    for response in (http.get(f"/v1/models/tiny/versions/{digits}"),
                     http.post(f"/v1/models/tiny/versions/{digits}:predict", json=GOOD)):
        assert (response.status_code, response.content) == (400, b"")
    assert http.get("/v1/models/tiny/versions/" + "0" * 30 + "1").status_code == 200
    assert_still_serving(server, http)


def test_a_non_object_document_is_echoed_cut_on_a_character_boundary(server, http):
    document = ["a" + "é" * 150 + "ü" * 300]
    message = error_of(http.post("/v1/models/tiny:predict", content=json.dumps(document, ensure_ascii=False).encode()))
    echoed = json.dumps(document, ensure_ascii=False, separators=(",", ":"))[:200]
    assert message == f"JSON Value: {echoed} Is not object"
    assert_still_serving(server, http)


def test_arrays_nested_500000_deep_are_400_naming_the_depth(server, http):
    body = b'{"instances": ' + b"[" * 500_000 + b"]" * 500_000 + b"}"
    message = error_of(http.post("/v1/models/tiny:predict", content=body))
    assert "nested deeper than" in message
    assert_still_serving(server, http)


@pytest.mark.parametrize("body, fragment", [
    (b"{oops", "JSON Parse error"),
    (b"", "The document is empty"),
    (b"[1, 2]", "Is not object"),
    (b'{"instances": [["a", "b", "c"]]}', ""),                        # wrong dtype
    (b'{"instances": [[1.0, 2.0, 3.0], [1.0]]}', ""),                 # ragged
    (b'{"inputs": {"z": [[1.0, 2.0, 3.0]]}}', "z"),                    # unknown input
    (b'{"signature_name": "sleep", "inputs": {}}', ""),                # missing input
    (b'{"signature_name": "nope", "instances": [1]}', 'Serving signature name: "nope" not found'),
    (b'{"signature_name": 7, "instances": [1]}', "signature_name"),
    (b'{"instances": [[1.0, 2.0, 3.0]], "inputs": {"x": [[1.0, 2.0, 3.0]]}}', "only one of 'inputs' or 'instances'"),
    (b'{"instances": [[NaN, Infinity, -Infinity]], "extra": 1}', None),  # non-finite numbers are fine
])
def test_bad_predict_input_is_400_and_the_server_keeps_serving(server, http, body, fragment):
    response = http.post("/v1/models/tiny:predict", content=body)
    if fragment is None:
        assert response.status_code == 200, response.text
    else:
        assert fragment in error_of(response)
    assert_still_serving(server, http)


def test_bad_classify_input_is_400(server, http):
    assert "'examples'" in error_of(http.post("/v1/models/tiny:classify", json={"signature_name": "classification"}))
    assert error_of(http.post("/v1/models/tiny:classify",
                              json={"signature_name": "classification", "examples": [{"x": "text"}]}))
    assert_still_serving(server, http)


def test_paths_outside_v1_are_404_json_and_other_v1_paths_malformed(server, http):
    assert error_of(http.get("/healthz"), 404) == "Not found: GET /healthz"
    assert error_of(http.patch("/v1/models/tiny")) == "Malformed request: PATCH /v1/models/tiny"


def test_rest_timeout_is_504_deadline_exceeded_and_the_server_stays_up(server, http):
    message = error_of(http.post("/v1/models/tiny:predict",
                                 json={"signature_name": "sleep", "instances": [4.0]}), 504)
    assert "--rest_api_timeout_in_ms=1500" in message
    assert_still_serving(server, http)


def test_cors_preflight_and_headers(server, http):
    preflight = http.options("/v1/models/tiny:predict", headers={"Origin": "http://example.com"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "*"
    refused = http.options("/v1/models/tiny:predict")   # TF Serving answers it with no body
    assert (refused.status_code, refused.content) == (400, b"")


def test_good_requests_are_unaffected_by_concurrent_bad_ones(server):
    failures: list[str] = []

    def send(body: bytes, expect: int) -> None:
        with httpx.Client(base_url=server.rest_url, timeout=60) as client:
            for _ in range(15):
                response = client.post("/v1/models/tiny:predict", content=body)
                if response.status_code != expect:
                    failures.append(f"{expect} expected, got {response.status_code}: {response.text[:200]}")

    deep = b'{"instances": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    threads = [threading.Thread(target=send, args=(b, code)) for b, code in [
        (b"{bad", 400), (deep, 400), (b'{"instances": [[1.0, 2.0, 3.0]]}', 200), (b'{"instances": [["a"]]}', 400),
        (b'{"instances": [[1.0, 2.0, 3.0]]}', 200)]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures, failures[:5]


def test_malformed_requests_are_counted_with_an_empty_model_name(server, http):
    def count() -> float:
        page = http.get(MONITORING_PATH).text
        prefix = ':tensorflow:serving:request_count{model_name="",status="INVALID_ARGUMENT"} '
        return sum(float(line[len(prefix):]) for line in page.splitlines() if line.startswith(prefix))

    before = count()
    http.put("/v1/models/tiny")
    assert count() == before + 1


def test_grpc_tensor_whose_content_does_not_match_its_shape_is_invalid_argument(server):
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    request = predict_pb2.PredictRequest()
    request.model_spec.name = "tiny"
    tensor = request.inputs["x"]
    tensor.dtype = 1
    for size in (2, 3):
        tensor.tensor_shape.dim.add().size = size
    tensor.tensor_content = np.ones(5, np.float32).tobytes()
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.Predict(request, timeout=30)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "x" in caught.value.details()
        request.inputs["x"].tensor_content = np.ones(6, np.float32).tobytes()
        assert stub.Predict(request, timeout=30).model_spec.version.value == 1


class FailingDataPlane(DataPlane):
    """The real data plane, except that model status fails as a bug would: with Python's own exception."""

    def model_status(self, spec: ModelSpec):
        raise MemoryError("Unable to allocate 238. GiB for an array with shape (1000000, 8, 8, 1)")


def test_an_unexpected_exception_is_500_with_a_request_id_and_no_python_internals(tiny_manager, metrics, caplog):
    port = free_port()
    frontend = RestFrontend(FailingDataPlane(tiny_manager, metrics), port=port, host="127.0.0.1", num_threads=1)
    frontend.start()
    try:
        with caplog.at_level("ERROR"):
            response = httpx.get(f"http://127.0.0.1:{port}/v1/models/tiny", timeout=30)
    finally:
        frontend.stop(grace=1)
    message = error_of(response, 500)
    assert "MemoryError" not in message and "GiB" not in message and "Traceback" not in message
    request_id = re.fullmatch(r"Internal error while handling GET /v1/models/tiny \(request id ([0-9a-f]{16})\); "
                              r"see the server log", message).group(1)
    assert f"(request id {request_id})" in caplog.text
    assert "MemoryError: Unable to allocate 238. GiB" in caplog.text
