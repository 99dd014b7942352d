"""Bad input gets a 400 / INVALID_ARGUMENT naming the problem; the server stays up for everyone else."""
from __future__ import annotations

import threading

import grpc
import httpx
import numpy as np
import pytest

from tests.server.frontend.conftest import MONITORING_PATH, tiny_flags
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


def test_body_over_the_limit_is_400_naming_the_limit(server, http):
    body = b'{"instances": [' + b"1.0," * (BODY_LIMIT // 4) + b"1.0]}"
    message = error_of(http.post("/v1/models/tiny:predict", content=body))
    assert f"exceeds the limit of {BODY_LIMIT} bytes" in message and "--rest_api_max_body_bytes" in message
    assert_still_serving(server, http)


def test_chunked_body_over_the_limit_is_cut_off_while_streaming(server, http):
    def chunks():
        yield b'{"instances": ['
        for _ in range(BODY_LIMIT // 4096 + 2):
            yield b"1.0," * 1024
        yield b"1.0]}"

    message = error_of(http.post("/v1/models/tiny:predict", content=chunks()))
    assert f"exceeds the limit of {BODY_LIMIT} bytes" in message
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
    assert error_of(http.options("/v1/models/tiny:predict")) == "Origin header is missing in CORS preflight"


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
        (b"{bad", 400), (deep, 400), (b'{"instances": [[1.0, 2.0, 3.0]]}', 200), (b'{"instances": [[1.0]]}', 400),
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
