"""Retries on UNAVAILABLE / 503 / connection failure only; attempts and time bounded; deadlines."""
from __future__ import annotations

import random

import numpy as np
import pytest

from serving import status
from serving.client import GrpcClient, RestClient, RetryPolicy, errors
from tests.support.ports import free_port

INPUT = {"images": np.ones((1, 8, 8, 1), np.float32)}
QUICK = RetryPolicy(max_attempts=4, initial_backoff=0.01, max_backoff=0.02)


@pytest.fixture(params=["grpc", "rest"])
def make_client(request, grpc_target, rest_url):
    made = []

    def make(**kwargs):
        client = GrpcClient(grpc_target, **kwargs) if request.param == "grpc" else RestClient(rest_url, **kwargs)
        made.append(client)
        client.metadata("digits")  # signature cache primed: failures then hit predict only
        return client
    yield make
    for client in made:
        client.close()


def test_unavailable_is_retried_until_the_server_answers(make_client, backend):
    client = make_client(retry=QUICK)
    backend.fail(status.Code.UNAVAILABLE, "The batch scheduling queue to which this task was submitted is full", 3)
    outputs = client.predict("digits", INPUT)
    assert outputs["probabilities"].shape == (1, 10)
    assert backend.calls["predict"] == 4


def test_attempts_are_bounded(make_client, backend):
    client = make_client(retry=RetryPolicy(max_attempts=3, initial_backoff=0.01))
    backend.fail(status.Code.UNAVAILABLE, "still down", 10)
    with pytest.raises(errors.Unavailable, match="still down"):
        client.predict("digits", INPUT)
    assert backend.calls["predict"] == 3


@pytest.mark.parametrize("code", [status.Code.INVALID_ARGUMENT, status.Code.NOT_FOUND,
                                  status.Code.FAILED_PRECONDITION, status.Code.RESOURCE_EXHAUSTED],
                         ids=lambda c: c.name)
def test_permanent_errors_are_not_retried(make_client, backend, code):
    client = make_client(retry=QUICK)
    backend.fail(code, "no", 1)
    with pytest.raises(errors.ServingError):
        client.predict("digits", INPUT)
    assert backend.calls["predict"] == 1


def test_retry_stops_at_the_call_deadline(make_client, backend):
    client = make_client(retry=RetryPolicy(max_attempts=100, initial_backoff=0.2, max_backoff=0.2, jitter=0.0))
    backend.fail(status.Code.UNAVAILABLE, "down", 100)
    with pytest.raises(errors.Unavailable):
        client.predict("digits", INPUT, timeout=0.5)
    assert 1 < backend.calls["predict"] <= 3


def test_slow_answer_raises_deadline_exceeded(make_client, backend):
    client = make_client(retry=QUICK)
    backend.delay = 3.0
    with pytest.raises(errors.DeadlineExceeded):
        client.predict("digits", INPUT, timeout=0.3)
    assert backend.calls["predict"] == 1


def test_default_timeout_applies_when_none_is_given(make_client, backend):
    client = make_client(retry=QUICK, timeout=0.3)
    backend.delay = 3.0
    with pytest.raises(errors.DeadlineExceeded):
        client.predict("digits", INPUT)


@pytest.mark.parametrize("kind", ["grpc", "rest"])
def test_connection_failures_are_retried_then_unavailable(kind):
    port = free_port()  # nothing listens here
    retried = []
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.01,
                         on_retry=lambda attempt, error, delay: retried.append((attempt, error.code)))
    client = GrpcClient(f"127.0.0.1:{port}", retry=policy) if kind == "grpc" \
        else RestClient(f"http://127.0.0.1:{port}", retry=policy)
    with client, pytest.raises(errors.Unavailable):
        client.status("digits", timeout=10)
    assert retried == [(1, status.Code.UNAVAILABLE), (2, status.Code.UNAVAILABLE)]


def test_backoff_grows_exponentially_with_jitter_and_a_cap():
    policy = RetryPolicy(initial_backoff=0.1, multiplier=2.0, max_backoff=0.5, jitter=0.5)
    rng = random.Random(7)
    for attempt, base in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.5), (9, 0.5)]:
        delays = [policy.backoff(attempt, rng) for _ in range(200)]
        assert all(base * 0.5 <= d <= base for d in delays)
        assert max(delays) - min(delays) > base * 0.3  # jittered, not constant


def test_policy_rejects_nonsense():
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(jitter=2.0)


@pytest.mark.parametrize("error", [errors.TlsError("the server's certificate is not trusted"),
                                   errors.Unauthenticated("missing API key"),
                                   errors.PermissionDenied("admin key needed")],
                         ids=lambda e: type(e).__name__)
def test_tls_and_authentication_failures_are_never_retried_whatever_the_retry_codes(error):
    policy = RetryPolicy(max_attempts=5, retry_codes=frozenset(status.Code))
    assert error.code in policy.retry_codes and not policy.should_retry(error, 1)
    assert policy.should_retry(errors.Unavailable("down"), 1)
