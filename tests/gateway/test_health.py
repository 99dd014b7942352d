"""The gateway's own health: ``/healthz`` answers 200 while TF Serving's REST port answers, 503 when not.

Compose's gateway healthcheck is this path with ``curl -f``; the test runs that very command (its
address moved to the test's port) against nginx in front of an upstream it stops and starts.
"""
from __future__ import annotations

import subprocess
from typing import Iterator

import pytest

from gateway.certs import Credentials, init_secrets
from serving.config.compose import load_compose_model
from serving.launcher import free_port
from tests.support.stub_upstream import StubUpstream
from tests.support.compose import CPU, PASSWORD, compose_env
from tests.support.gateway import Gateway, compose_values, running_gateway, upstream_values


@pytest.fixture(scope="module")
def healthcheck() -> list[str]:
    """Compose's gateway healthcheck command (``CMD`` dropped)."""
    model = load_compose_model(CPU, services=["gateway"], env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD))
    test = model["services"]["gateway"]["healthcheck"]["test"]
    assert test[0] == "CMD"
    return test[1:]


@pytest.fixture
def stub() -> Iterator[StubUpstream]:
    upstream = StubUpstream(free_port()).start()
    yield upstream
    upstream.stop()


@pytest.fixture
def stub_gateway(nginx, nginx_version, compose_gateway_env, tf_serving, stub, tmp_path) -> Iterator[Gateway]:
    secrets: Credentials = init_secrets(tmp_path / "secrets")
    values = compose_values(compose_gateway_env, **{**upstream_values(tf_serving),
                                                    "GATEWAY_REST_UPSTREAM": f"127.0.0.1:{stub.port}"})
    with running_gateway(nginx, nginx_version, values, tmp_path / "gateway", secrets, tf_serving) as gateway:
        yield gateway


def run_healthcheck(command: list[str], gateway: Gateway) -> int:
    port = gateway.values["GATEWAY_REST_LISTEN"].rsplit(":", 1)[1]
    moved = [part.replace("127.0.0.1:8501", f"127.0.0.1:{port}") for part in command]
    assert moved != command, f"the healthcheck no longer names the REST port: {command}"
    return subprocess.run(moved, capture_output=True, timeout=30).returncode


def test_healthz_needs_no_key_and_says_tf_serving_answers(gateway):
    with gateway.http() as http:
        response = http.get(gateway.rest_url + "/healthz")
    assert response.status_code == 200, response.text


def test_the_compose_healthcheck_fails_while_the_upstream_is_down_and_passes_again(stub_gateway, stub,
                                                                                    healthcheck):
    gateway = stub_gateway
    assert run_healthcheck(healthcheck, gateway) == 0
    stub.stop()
    with gateway.http() as http:
        down = http.get(gateway.rest_url + "/healthz")
    assert down.status_code == 503
    assert down.json() == {"error": "TF Serving is not reachable from the gateway"}
    assert run_healthcheck(healthcheck, gateway) != 0
    stub.start()
    assert run_healthcheck(healthcheck, gateway) == 0
    with gateway.http() as http:
        assert http.get(gateway.rest_url + "/healthz").status_code == 200
