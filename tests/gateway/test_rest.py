"""REST through the gateway (httpx, TLS with the test's CA): keys, roles, rate, body size."""
from __future__ import annotations

import httpx
import pytest

from exporter.manifest import load_manifest
from tests.support.gateway import MODEL, nginx_size

STATUS = f"/v1/models/{MODEL}"


@pytest.fixture(scope="module")
def predict_body(model_repo) -> dict:
    inputs = load_manifest(model_repo / MODEL / "1").sample_inputs()
    return {"inputs": {name: array.tolist() for name, array in inputs.items()}}


def test_the_client_key_reaches_tf_serving(gateway, predict_body):
    with gateway.http() as http:
        status = http.get(gateway.rest_url + STATUS, headers={"x-api-key": gateway.key()})
        assert status.status_code == 200, status.text
        assert status.json()["model_version_status"][0]["state"] == "AVAILABLE"
        predicted = http.post(f"{gateway.rest_url}{STATUS}:predict", json=predict_body,
                              headers={"x-api-key": gateway.key()})
        assert predicted.status_code == 200, predicted.text
        assert "outputs" in predicted.json()


def test_a_bearer_token_works_like_the_key(gateway):
    with gateway.http() as http:
        response = http.get(gateway.rest_url + STATUS, headers={"authorization": f"Bearer {gateway.key()}"})
        assert response.status_code == 200, response.text


@pytest.mark.parametrize("headers", [{}, {"x-api-key": "wrong"}, {"authorization": "Bearer wrong"},
                                     {"authorization": "Basic Y2xpZW50OmNsaWVudA=="}, {"x-api-key": ""}],
                         ids=["none", "wrong-key", "wrong-bearer", "basic", "empty-key"])
def test_no_key_or_a_wrong_one_is_401_in_tf_servings_error_format(gateway, headers):
    with gateway.http() as http:
        response = http.get(gateway.rest_url + STATUS, headers=headers)
    assert response.status_code == 401
    assert response.json() == {"error": "missing or unknown API key or client certificate"}
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_paths_beyond_inference_and_status_need_the_admin_key(gateway):
    metrics = "/monitoring/prometheus/metrics"
    with gateway.http() as http:
        refused = http.get(gateway.rest_url + metrics, headers={"x-api-key": gateway.key()})
        assert refused.status_code == 403
        assert refused.json() == {"error": "this call needs an admin credential"}
        allowed = http.get(gateway.rest_url + metrics, headers={"x-api-key": gateway.key("admin")})
        assert allowed.status_code == 200 and ":tensorflow:serving:" in allowed.text
        # The admin key serves everything a client key does.
        assert http.get(gateway.rest_url + STATUS, headers={"x-api-key": gateway.key("admin")}).status_code == 200


def test_a_body_over_the_limit_is_413_before_tf_serving_reads_it(gateway):
    limit = nginx_size(gateway.values["GATEWAY_MAX_BODY_SIZE"])
    with gateway.http() as http:
        response = http.post(f"{gateway.rest_url}{STATUS}:predict", content=b"0" * (limit + 1),
                             headers={"x-api-key": gateway.key(), "content-type": "application/json"})
    assert response.status_code == 413
    assert response.json() == {"error": f"request larger than {gateway.values['GATEWAY_MAX_BODY_SIZE']}"}


def test_over_the_rate_a_client_gets_429_and_others_are_still_served(rate_gateway):
    gateway = rate_gateway
    burst = int(gateway.values["GATEWAY_BURST"])
    statuses = []
    with gateway.http() as http:
        for _ in range(burst + 3):  # the first request and `burst` more pass; the bucket refills once a minute
            response = http.get(gateway.rest_url + STATUS, headers={"x-api-key": gateway.key("burst-rest")})
            statuses.append(response.status_code)
            if response.status_code == 429:
                break
        assert statuses[-1] == 429, f"no 429 after {len(statuses)} requests"
        assert set(statuses[:-1]) == {200} and burst + 1 <= len(statuses) - 1 <= burst + 2
        assert response.json()["error"].startswith("rate or concurrency limit")
        assert response.headers["retry-after"] == "1"
        other = http.get(gateway.rest_url + STATUS, headers={"x-api-key": gateway.key()})
        assert other.status_code == 200  # the limit is per client


def test_a_client_that_does_not_trust_the_gateways_ca_fails_the_handshake(gateway, foreign_secrets):
    with gateway.http(ca=foreign_secrets.ca_cert) as http:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            http.get(gateway.rest_url + STATUS, headers={"x-api-key": gateway.key()})


def test_plain_http_to_a_tls_port_is_refused(gateway):
    port = gateway.ports["rest"]
    with httpx.Client(timeout=10.0) as http:
        response = http.get(f"http://127.0.0.1:{port}{STATUS}", headers={"x-api-key": gateway.key()})
    assert response.status_code == 400  # nginx: "The plain HTTP request was sent to HTTPS port"
