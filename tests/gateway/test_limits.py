"""The gateway's limiter, by credential class (Debian's nginx with the repository's templates):

- a ``client`` key: GATEWAY_RATE per key, GATEWAY_CONN_PER_IP per address;
- the ``loadtest`` key of ``make certs``: GATEWAY_LOADTEST_RATE and GATEWAY_LOADTEST_CONN, per key, so a
  load test measures TF Serving and not the limiter;
- no known key: GATEWAY_FAILED_AUTH_RATE per address, so keys cannot be guessed at speed.

Every refusal is recognisable: REST 429 ``{"error": ...}`` naming the limit, gRPC RESOURCE_EXHAUSTED
starting "rate or concurrency limit of this client exceeded".
"""
from __future__ import annotations

import math
import secrets as random
import threading
import time

import grpc
import httpx
import pytest

from gateway.certs import Credentials, init_secrets
from serving.launcher import free_port
from tests.support.stub_upstream import StubUpstream
from tests.support.gateway import (
    MODEL,
    SLOW_REFILL,
    Gateway,
    compose_values,
    model_status,
    running_gateway,
    upstream_values,
)

STATUS = f"/v1/models/{MODEL}"
LIMIT_PREFIX = "rate or concurrency limit of this client exceeded"


@pytest.fixture(scope="module")
def limit_secrets(tmp_path_factory) -> Credentials:
    return init_secrets(tmp_path_factory.mktemp("limit-secrets"))


@pytest.fixture
def start_gateway(nginx, nginx_version, limit_secrets, compose_gateway_env, tf_serving, tmp_path):
    """``start_gateway(**values)``: the compose gateway with ``values`` changed, in front of the embedded server."""
    with_gateways = []

    def start(**values: str) -> Gateway:
        merged = {**compose_values(compose_gateway_env, **upstream_values(tf_serving)), **values}
        context = running_gateway(nginx, nginx_version, merged, tmp_path / f"gateway-{len(with_gateways)}",
                                  limit_secrets, tf_serving)
        with_gateways.append(context)
        return context.__enter__()

    yield start
    for context in reversed(with_gateways):
        context.__exit__(None, None, None)


def statuses(gateway: Gateway, key: str, count: int) -> list[httpx.Response]:
    with gateway.http() as http:
        return [http.get(gateway.rest_url + STATUS, headers={"x-api-key": key}) for _ in range(count)]


def test_the_loadtest_key_passes_a_burst_the_client_key_gets_429_on(start_gateway):
    gateway = start_gateway(GATEWAY_RATE=SLOW_REFILL)  # the client bucket refills once a minute
    burst = int(gateway.values["GATEWAY_BURST"])
    client = [r.status_code for r in statuses(gateway, gateway.key("client"), burst + 3)]
    assert client.count(429) >= 1 and set(client[:burst + 1]) == {200}
    loadtest = [r.status_code for r in statuses(gateway, gateway.key("loadtest"), 2 * (burst + 3))]
    assert set(loadtest) == {200}, f"{loadtest.count(429)} of {len(loadtest)} loadtest requests refused"


def test_a_client_over_its_rate_is_told_which_limit_in_rest_and_grpc(start_gateway):
    gateway = start_gateway(GATEWAY_RATE=SLOW_REFILL)
    burst = int(gateway.values["GATEWAY_BURST"])
    refused = statuses(gateway, gateway.key("admin"), burst + 2)[-1]
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error.startswith(LIMIT_PREFIX) and f"GATEWAY_RATE {SLOW_REFILL}" in error, error
    with grpc.secure_channel(gateway.grpc_target, gateway.channel_credentials()) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            model_status(channel, [("x-api-key", gateway.key("admin"))])
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert caught.value.details().startswith(LIMIT_PREFIX) and "GATEWAY_RATE" in caught.value.details()


def test_the_loadtest_key_over_its_own_rate_is_told_its_own_limit(start_gateway):
    gateway = start_gateway(GATEWAY_LOADTEST_RATE=SLOW_REFILL)
    burst = int(gateway.values["GATEWAY_BURST"])
    answers = statuses(gateway, gateway.key("loadtest"), burst + 3)
    assert answers[-1].status_code == 429
    error = answers[-1].json()["error"]
    assert error.startswith(LIMIT_PREFIX) and f"GATEWAY_LOADTEST_RATE {SLOW_REFILL}" in error, error
    assert statuses(gateway, gateway.key("client"), 1)[0].status_code == 200  # the client's own bucket


def test_concurrency_the_loadtest_key_has_its_own_limit_not_the_addresss(start_gateway, tmp_path):
    stub = StubUpstream(free_port()).start()
    gateway = start_gateway(GATEWAY_REST_UPSTREAM=f"127.0.0.1:{stub.port}", GATEWAY_CONN_PER_IP="1",
                            GATEWAY_LOADTEST_CONN="2")
    stub.release.clear()
    held: list[threading.Thread] = []

    def hold(key: str) -> None:
        thread = threading.Thread(target=statuses, args=(gateway, key, 1), daemon=True)
        thread.start()
        held.append(thread)
        assert stub.held.acquire(timeout=30), "the request did not reach the upstream"

    try:
        hold(gateway.key("client"))  # the address's one concurrent request
        over = statuses(gateway, gateway.key("client"), 1)[0]
        assert over.status_code == 429 and "GATEWAY_CONN_PER_IP 1" in over.json()["error"]
        hold(gateway.key("loadtest"))  # not counted against the address
        hold(gateway.key("loadtest"))
        over = statuses(gateway, gateway.key("loadtest"), 1)[0]
        assert over.status_code == 429 and "GATEWAY_LOADTEST_CONN 2" in over.json()["error"]
    finally:
        stub.release.set()
        for thread in held:
            thread.join(30)
        stub.stop()


def test_guessed_keys_from_one_address_get_429_and_a_valid_key_is_unaffected(start_gateway):
    gateway = start_gateway()
    burst = int(gateway.values["GATEWAY_FAILED_AUTH_BURST"])
    rate = float(gateway.values["GATEWAY_FAILED_AUTH_RATE"].removesuffix("r/s"))
    guesses, valid = [], []
    started = time.monotonic()
    with gateway.http() as http:
        for i in range(200):
            guesses.append(http.get(gateway.rest_url + STATUS, headers={"x-api-key": random.token_hex(32)}))
            if i % 20 == 19:
                valid.append(http.get(gateway.rest_url + STATUS, headers={"x-api-key": gateway.key()}).status_code)
    elapsed = time.monotonic() - started
    codes = [r.status_code for r in guesses]
    assert set(codes) <= {401, 429}
    # The burst, then the refill while they ran: everything else is refused before any key is looked at.
    assert codes.count(401) <= burst + 1 + math.ceil(rate * elapsed), (codes.count(401), elapsed)
    assert codes.count(429) >= 200 - (burst + 1 + math.ceil(rate * elapsed))
    assert valid == [200] * 10
    error = next(r for r in guesses if r.status_code == 429).json()["error"]
    assert "GATEWAY_FAILED_AUTH_RATE" in error, error
    # The same address over gRPC shares the bucket. Tokens refilled since the loop ended (opening a TLS
    # channel on a loaded machine takes a while at 5r/s) each let one guess through as UNAUTHENTICATED;
    # then the guess is refused before any key is looked at.
    let_through = []
    with grpc.secure_channel(gateway.grpc_target, gateway.channel_credentials()) as channel:
        for _ in range(200):
            with pytest.raises(grpc.RpcError) as caught:
                model_status(channel, [("x-api-key", "guess")])
            if caught.value.code() != grpc.StatusCode.UNAUTHENTICATED:
                break
            let_through.append(caught.value.code())
    since = time.monotonic() - started - elapsed
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, caught.value
    assert len(let_through) <= 1 + math.ceil(rate * since), (len(let_through), since)


def test_an_unknown_key_within_the_burst_is_still_401(start_gateway):
    gateway = start_gateway()
    with gateway.http() as http:
        response = http.get(gateway.rest_url + STATUS, headers={"x-api-key": "wrong"})
    assert response.status_code == 401
    assert response.json() == {"error": "missing or unknown API key or client certificate"}
