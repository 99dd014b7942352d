"""The SDK against servers that misbehave: its timeout is a deadline, its answers are bounded, a state change
is sent once, a malformed answer is a ServingError, and a credential never travels or prints in the clear.

Real servers on free ports (``hostile_servers``); memory is measured in a subprocess (``ru_maxrss``).
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import numpy as np
import pytest

from serving import status
from serving.checkout import REPO_ROOT
from serving.client import AsyncRestClient, GrpcClient, NO_RETRY, RestClient, RetryPolicy, errors
from tests.support import hostile_servers as hs

GET_META = "/tensorflow.serving.PredictionService/GetModelMetadata"
GET_STATUS = "/tensorflow.serving.ModelService/GetModelStatus"
PREDICT = "/tensorflow.serving.PredictionService/Predict"
RELOAD = "/tensorflow.serving.ModelService/HandleReloadConfigRequest"
INPUT = {"x": np.ones(2, np.float32)}
SECRET = "k3y-SECRET-value"


# ------------------------------------------------------------------ the timeout is a deadline

@pytest.fixture
def trickle():
    server = hs.TrickleHttpServer(interval=0.5).start()
    yield server
    server.stop_trickling.set()
    server.stop()


@pytest.mark.slow
def test_a_trickling_rest_server_cannot_hold_a_call_past_its_timeout(trickle):
    with RestClient(trickle.url, timeout=2, retry=NO_RETRY) as client:
        started = time.monotonic()
        with pytest.raises(errors.DeadlineExceeded):
            client.predict("m", INPUT)
        assert time.monotonic() - started < 3.0
    assert trickle.first_request.is_set()


@pytest.mark.slow
def test_a_trickling_rest_server_cannot_hold_an_async_call_past_its_timeout(trickle):
    async def call() -> float:
        async with AsyncRestClient(trickle.url, timeout=2, retry=NO_RETRY) as client:
            started = time.monotonic()
            with pytest.raises(errors.DeadlineExceeded):
                await client.predict("m", INPUT)
            return time.monotonic() - started
    assert asyncio.run(call()) < 3.0


@pytest.mark.slow
def test_grpc_metadata_and_predict_share_one_deadline():
    server = hs.FlakyGrpcServer({GET_META: b"", PREDICT: hs.tensor_bomb_predict_response((2,), (1.0, 2.0))},
                                delays={GET_META: 1.5, PREDICT: 1.5}).start()
    try:
        with GrpcClient(server.target, timeout=2, retry=NO_RETRY) as client:
            started = time.monotonic()
            with pytest.raises(errors.DeadlineExceeded):
                client.predict("m", INPUT, version=1)
            assert time.monotonic() - started < 3.0
        assert server.calls[GET_META] == 1 and server.calls[PREDICT] == 1
    finally:
        server.stop()


@pytest.mark.slow
def test_async_grpc_metadata_and_predict_share_one_deadline():
    from serving.client import AsyncGrpcClient

    server = hs.FlakyGrpcServer({GET_META: b"", PREDICT: hs.tensor_bomb_predict_response((2,), (1.0, 2.0))},
                                delays={GET_META: 1.5, PREDICT: 1.5}).start()

    async def call() -> float:
        async with AsyncGrpcClient(server.target, timeout=2, retry=NO_RETRY) as client:
            started = time.monotonic()
            with pytest.raises(errors.DeadlineExceeded):
                await client.predict("m", INPUT, version=1)
            return time.monotonic() - started
    try:
        assert asyncio.run(call()) < 3.0
    finally:
        server.stop()


# ------------------------------------------------------------------ answers are bounded

_MEASURE = """
import json, resource, sys
sys.path.insert(0, {root!r})
import numpy as np
from serving.client import GrpcClient, RestClient, NO_RETRY
from tests.support import hostile_servers as hs
def rss(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
{setup}
base = rss()
try:
    client.predict("m", {{"x": np.ones(2, np.float32)}}, **{kwargs})
    outcome = "ok"
except Exception as exc:
    outcome = type(exc).__name__ + ": " + str(exc)
print(json.dumps({{"outcome": outcome, "grew_mib": rss() - base}}))
"""

_SETUPS = {
    "rest_256_mib_answer": (
        "def write(out):\n"
        "    out.write(b'{\"predictions\": [')\n"
        "    for _ in range(256): out.write(b'0,' * (1 << 19))\n"
        "    out.write(b'0]}')\n"
        "server = hs.BigHttpServer(write, length=17 + 256 * (1 << 20) + 3).start()\n"
        "client = RestClient(server.url, timeout=60, retry=NO_RETRY)\n", {}),
    "rest_gzip_bomb": (
        "server = hs.BigHttpServer(hs.gzip_bomb(1 << 30), {'Content-Encoding': 'gzip'}).start()\n"
        "client = RestClient(server.url, timeout=60, retry=NO_RETRY)\n", {}),
    "grpc_two_floats_shaped_6e8_by_2": (
        "GET_META, PREDICT = %r, %r\n"
        "server = hs.FlakyGrpcServer({GET_META: b'', PREDICT: hs.tensor_bomb_predict_response()}).start()\n"
        "client = GrpcClient(server.target, timeout=60, retry=NO_RETRY)\n" % (GET_META, PREDICT), {"version": 1}),
}


@pytest.mark.parametrize("case", [pytest.param(case, marks=pytest.mark.slow) if case == "rest_gzip_bomb" else case
                                  for case in sorted(_SETUPS)])   # the bomb takes seconds to build
def test_an_oversized_answer_is_refused_with_bounded_memory(case):
    setup, kwargs = _SETUPS[case]
    code = _MEASURE.format(root=str(REPO_ROOT), setup=setup, kwargs=kwargs)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["outcome"].startswith("ResponseTooLarge: "), report
    assert "max_response_bytes=67108864" in report["outcome"]
    assert report["grew_mib"] < 400, report   # the default limit is 64 MiB; before, 3.9 to 4.6 GiB


def test_max_response_bytes_lets_an_answer_up_to_the_limit_through():
    body = json.dumps({"predictions": [1.0, 2.0]}).encode() + b" " * 200   # longer than the metadata answer
    server = hs.BigHttpServer(body).start()
    try:
        with RestClient(server.url, retry=NO_RETRY, max_response_bytes=len(body)) as client:
            assert client.predict("m", INPUT)["predictions"].tolist() == [1.0, 2.0]
        with RestClient(server.url, retry=NO_RETRY, max_response_bytes=len(body) - 1) as client, \
                pytest.raises(errors.ResponseTooLarge, match=f"max_response_bytes={len(body) - 1}"):
            client.predict("m", INPUT)
    finally:
        server.stop()


def test_grpc_receive_limit_is_max_response_bytes():
    big = hs.tensor_bomb_predict_response((4096,), tuple(float(i) for i in range(4096)))
    server = hs.FlakyGrpcServer({GET_META: b"", PREDICT: big}).start()
    try:
        with GrpcClient(server.target, retry=NO_RETRY, max_response_bytes=1024) as client, \
                pytest.raises(errors.ResponseTooLarge, match="max_response_bytes=1024"):
            client.predict("m", INPUT, version=1)
    finally:
        server.stop()


# ------------------------------------------------------------------ state changes are sent once

def test_reload_config_is_never_retried_and_a_read_is():
    server = hs.FlakyGrpcServer({RELOAD: b"", GET_STATUS: b""}, failures={RELOAD: 1, GET_STATUS: 1}).start()
    try:
        with GrpcClient(server.target, retry=RetryPolicy(initial_backoff=0.01)) as client:
            with pytest.raises(errors.Unavailable):
                client.reload_config("")
            assert server.calls[RELOAD] == 1
            assert client.status("m") == []
            assert server.calls[GET_STATUS] == 2
    finally:
        server.stop()


# ------------------------------------------------------------------ every failure is a ServingError

@pytest.mark.parametrize("answer", [b"\x0a\x05\xff\xff",                                      # truncated
                                    hs.tensor_bomb_predict_response((3,), (1.0, 2.0, 3.0, 4.0)),  # bad shape
                                    b"\x0a\x08\x0a\x01y\x12\x03\x08\xc8\x01"],                 # unknown dtype
                         ids=["truncated", "more-values-than-shape", "unknown-dtype"])
def test_a_malformed_grpc_answer_is_a_serving_error(answer):
    server = hs.FlakyGrpcServer({GET_META: b"", PREDICT: answer}).start()
    try:
        with GrpcClient(server.target, retry=NO_RETRY) as client, pytest.raises(errors.Internal, match="malformed"):
            client.predict("m", INPUT, version=1)
    finally:
        server.stop()


@pytest.mark.parametrize("body", [b'{"predictions": [1, 2', b"[]", b'{"predictions": [[1, 2], [3]]}'],
                         ids=["truncated", "not-an-object", "ragged"])
def test_a_malformed_rest_answer_is_a_serving_error(body):
    server = hs.BigHttpServer(body).start()
    try:
        with RestClient(server.url, retry=NO_RETRY) as client, \
                pytest.raises(errors.Internal, match="the server's Predict answer is malformed"):
            client.predict("m", INPUT)   # not InvalidArgument: the caller's request was fine
    finally:
        server.stop()


# ------------------------------------------------------------------ credentials

def test_rest_refuses_a_credential_over_plaintext_unless_insecure(rest_url, backend):
    with pytest.raises(ValueError, match=r"insecure=True \(CLI --insecure\)") as refused:
        RestClient(rest_url, api_key=SECRET)
    assert SECRET not in str(refused.value) and "plaintext" in str(refused.value)
    with RestClient(rest_url, api_key=SECRET + "\n", insecure=True) as client:
        client.status("digits")
    assert backend.headers[-1]["x-api-key"] == SECRET


def test_grpc_with_a_credential_and_no_tls_arguments_speaks_tls(grpc_target, backend):
    with GrpcClient(grpc_target, api_key=SECRET, retry=NO_RETRY) as client, \
            pytest.raises(errors.TlsError, match="insecure=True") as refused:
        client.status("digits")
    assert SECRET not in refused.value.details
    assert not backend.headers      # the key never reached the plaintext server
    with GrpcClient(grpc_target, api_key=SECRET + "\r\n", insecure=True) as client:
        client.status("digits")
    assert backend.headers[-1]["x-api-key"] == SECRET


@pytest.mark.parametrize("cls", [GrpcClient, RestClient])
def test_a_key_with_inner_whitespace_is_refused_without_printing_it(cls):
    where = "127.0.0.1:1" if cls is GrpcClient else "https://127.0.0.1:1"
    for bad in (SECRET + "\n\n", "k3y SECRET", "k3y\x00SECRET"):
        with pytest.raises(ValueError, match="api_key holds") as refused:
            cls(where, api_key=bad)
        assert "SECRET" not in str(refused.value)


def test_a_rest_transport_error_never_prints_the_key(rest_url, backend):
    # A header value httpx refuses to send: its error quoted the value (the whole key, retried 5 times).
    with RestClient(rest_url, headers={"x-api-key": "k3y\nSECRET"}, retry=NO_RETRY) as client, \
            pytest.raises(status.ServingError) as failed:
        client.status("digits")
    assert "SECRET" not in str(failed.value) and "<redacted>" in str(failed.value)


@pytest.mark.parametrize("cls", [GrpcClient, RestClient])
def test_no_repr_of_a_client_shows_its_key(cls):
    where = "127.0.0.1:1" if cls is GrpcClient else "https://127.0.0.1:1"
    with cls(where, api_key=SECRET, bearer_token="t0k-SECRET") as client:
        shown = repr(client) + repr(vars(client)) + repr(vars(client).get("_plan"))
    assert "SECRET" not in shown


def test_the_cli_refuses_a_key_over_plaintext_unless_insecure(rest_url, backend, capsys, monkeypatch):
    from serving.client.cli import main

    monkeypatch.setenv("TFS_API_KEY", SECRET + "\n")
    assert main(["status", "--rest", rest_url, "--model", "digits"]) == 2
    err = capsys.readouterr().err
    assert "--insecure" in err and SECRET not in err
    assert main(["status", "--rest", rest_url, "--model", "digits", "--insecure"]) == 0
    assert backend.headers[-1]["x-api-key"] == SECRET


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_answer_within_the_limit_decodes_whole(encoding):
    import gzip
    import zlib

    doc = json.dumps({"predictions": [float(i) for i in range(5000)]}).encode()
    if encoding == "gzip":   # two gzip members, as RFC 1952 allows: both are the answer
        half = len(doc) // 2
        body = gzip.compress(doc[:half]) + gzip.compress(doc[half:])
    else:
        body = zlib.compress(doc)
    server = hs.BigHttpServer(body, {"Content-Encoding": encoding}).start()
    try:
        with RestClient(server.url, retry=NO_RETRY) as client:
            assert client.predict("m", INPUT)["predictions"].tolist() == list(range(5000))
    finally:
        server.stop()


def test_a_truncated_gzip_answer_is_a_serving_error():
    import gzip

    body = gzip.compress(json.dumps({"predictions": [1.0] * 1000}).encode())[:-20]
    server = hs.BigHttpServer(body, {"Content-Encoding": "gzip"}).start()
    try:
        with RestClient(server.url, retry=NO_RETRY) as client, pytest.raises(errors.Internal, match="gzip"):
            client.predict("m", INPUT)
    finally:
        server.stop()
