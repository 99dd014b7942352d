"""TLS, mutual TLS and API credentials in the SDK, against real TLS servers with test-made certificates.

The fake TF Serving servers (``fake_serving``) run here over TLS: gRPC with
``grpc.ssl_server_credentials`` and REST over HTTPS (``HttpsRestServer``),
each also in a mutual-TLS variant that requires a client certificate signed
by the test CA. Every server records the headers / metadata each call carried.
"""
from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import sys
import time
from types import SimpleNamespace

import grpc
import numpy as np
import pytest

from serving import status
from serving.checkout import REPO_ROOT
from serving.client import AsyncGrpcClient, AsyncRestClient, GrpcClient, RestClient, RetryPolicy, errors
from serving.client._rest import answer_of
from tests.support.fake_serving import Backend, FakeGrpcServer, HttpsRestServer
from tests.support.pki import Pki, make_pki

INPUT = {"images": np.ones((1, 8, 8, 1), np.float32)}
BACKOFF = 5.0
# A retry would wait BACKOFF seconds first: a failure within it was tried once.
PATIENT = RetryPolicy(max_attempts=5, initial_backoff=BACKOFF, max_backoff=BACKOFF, jitter=0.0)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _grpc_credentials(pki: Pki, mutual: bool) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials([(pki.key("server").read_bytes(), pki.cert("server").read_bytes())],
                                       root_certificates=pki.ca.read_bytes() if mutual else None,
                                       require_client_auth=mutual)


def _ssl_context(pki: Pki, mutual: bool) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.cert("server"), pki.key("server"))
    if mutual:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(pki.ca)
        # TLS 1.2 refuses the client inside the handshake. Under TLS 1.3 the client's side of the
        # handshake is already done when the server refuses; the alert then races the client's request,
        # and a reset may overtake it (gRPC waits for the server first; nginx answers HTTP 400 instead).
        context.maximum_version = ssl.TLSVersion.TLSv1_2
    return context


@pytest.fixture(scope="module")
def secure(tf, pki):
    """TLS and mutual-TLS fake servers, gRPC and REST, over one backend."""
    backend = Backend()
    servers = {
        ("grpc", False): FakeGrpcServer(backend, tf, _grpc_credentials(pki, False)).start(),
        ("grpc", True): FakeGrpcServer(backend, tf, _grpc_credentials(pki, True)).start(),
        ("rest", False): HttpsRestServer(backend, _ssl_context(pki, False)).start(),
        ("rest", True): HttpsRestServer(backend, _ssl_context(pki, True)).start(),
    }
    yield SimpleNamespace(backend=backend, servers=servers)
    for server in servers.values():
        server.stop()


@pytest.fixture
def secure_backend(secure) -> Backend:
    secure.backend.headers.clear()
    secure.backend.calls.clear()
    secure.backend.failures.clear()
    return secure.backend


def _address(secure, transport: str, mutual: bool = False) -> str:
    server = secure.servers[(transport, mutual)]
    return server.target if transport == "grpc" else server.url


@pytest.fixture(params=["grpc", "rest"])
def transport(request) -> str:
    return request.param


@pytest.fixture
def connect(secure, secure_backend, transport):
    """``connect(mutual=False, **client arguments)``: a sync client of this transport; closed after the test."""
    made = []

    def make(mutual: bool = False, **kwargs):
        cls = GrpcClient if transport == "grpc" else RestClient
        client = cls(_address(secure, transport, mutual), **kwargs)
        made.append(client)
        return client
    yield make
    for client in made:
        client.close()


def _tls_error(call, *, within: float = BACKOFF) -> errors.TlsError:
    """The TlsError ``call()`` raises, asserting it came sooner than any retry could."""
    started = time.monotonic()
    with pytest.raises(errors.TlsError) as caught:
        call()
    assert time.monotonic() - started < within
    return caught.value


@pytest.mark.parametrize("form", ["path", "bytes", "text"])
def test_a_private_ca_given_as_path_bytes_or_pem_text_is_trusted(connect, pki, form):
    root = {"path": pki.ca, "bytes": pki.ca.read_bytes(), "text": pki.ca.read_text()}[form]
    client = connect(root_certificates=root)
    assert [v.version for v in client.status("digits")] == [1, 2, 3]
    assert client.predict("digits", INPUT)["probabilities"].shape == (1, 10)


def test_an_untrusted_server_certificate_is_a_tls_error_tried_once(connect, pki, secure_backend):
    retries = []
    client = connect(root_certificates=pki.rogue_ca,
                     retry=RetryPolicy(max_attempts=5, initial_backoff=BACKOFF, jitter=0.0,
                                       on_retry=lambda *args: retries.append(args)))
    error = _tls_error(lambda: client.status("digits"))
    assert retries == [] and secure_backend.headers == []  # no retry; no request reached the server
    assert "the server's certificate is not trusted" in error.details
    assert "CERTIFICATE_VERIFY_FAILED" in error.details
    assert error.code == status.Code.UNAVAILABLE and not isinstance(error, errors.Unavailable)
    assert error.__cause__ is not None  # chained from the transport's exception


def test_server_name_overrides_the_name_the_certificate_must_carry(connect, pki):
    assert connect(root_certificates=pki.ca, server_name="localhost").status("digits")
    error = _tls_error(lambda: connect(root_certificates=pki.ca, server_name="elsewhere.test",
                                       retry=PATIENT).status("digits"))
    assert "does not carry the name dialled; pass server_name=" in error.details


def test_mutual_tls_with_a_client_certificate_signed_by_the_servers_ca_succeeds(connect, pki):
    client = connect(mutual=True, root_certificates=pki.ca, client_cert=pki.cert("client"),
                     client_key=pki.key("client").read_bytes())
    assert client.predict("digits", INPUT)["logits"].shape == (1, 10)


def test_mutual_tls_without_a_client_certificate_is_refused_with_a_clear_tls_error(connect, pki, secure_backend):
    client = connect(mutual=True, root_certificates=pki.ca, retry=PATIENT)
    error = _tls_error(lambda: client.status("digits"))
    assert "client certificate" in error.details and "client_cert=" in error.details
    assert secure_backend.headers == []


def test_mutual_tls_refuses_a_client_certificate_from_another_ca(connect, pki, secure_backend):
    client = connect(mutual=True, root_certificates=pki.ca, client_cert=pki.cert("rogue-client"),
                     client_key=pki.key("rogue-client"), retry=PATIENT)
    error = _tls_error(lambda: client.status("digits"))
    assert "client certificate" in error.details
    assert secure_backend.headers == []


def test_a_tls_client_on_a_plaintext_port_is_told_the_server_does_not_speak_tls(
        transport, grpc_target, rest_url, pki):
    if transport == "grpc":
        client = GrpcClient(grpc_target, root_certificates=pki.ca, retry=PATIENT)
    else:
        client = RestClient(rest_url.replace("http://", "https://"), root_certificates=pki.ca, retry=PATIENT)
    with client:
        error = _tls_error(lambda: client.status("digits"))
    assert "does not speak TLS on this port" in error.details


def test_api_key_and_bearer_token_go_with_every_call(connect, pki, secure_backend, transport):
    client = connect(root_certificates=pki.ca, api_key="k-123", bearer_token="t-456")
    client.metadata("digits")
    client.predict("digits", [np.ones((8, 8, 1)).tolist()])
    client.status("digits")
    assert len(secure_backend.headers) == 3
    for headers in secure_backend.headers:
        assert headers["x-api-key"] == "k-123"
        assert headers["authorization"] == "Bearer t-456"


def test_without_credentials_no_auth_header_is_sent(connect, pki, secure_backend):
    connect(root_certificates=pki.ca).status("digits")
    (headers,) = secure_backend.headers
    assert "x-api-key" not in headers and "authorization" not in headers


@pytest.mark.parametrize("code", [status.Code.UNAUTHENTICATED, status.Code.PERMISSION_DENIED],
                         ids=lambda c: c.name)
def test_authentication_failures_raise_their_class_and_are_never_retried(connect, pki, secure_backend, code):
    retry_everything = RetryPolicy(max_attempts=5, initial_backoff=0.01,
                                   retry_codes=frozenset({code, status.Code.UNAVAILABLE}))
    client = connect(root_certificates=pki.ca, api_key="wrong", retry=retry_everything)
    secure_backend.fail(code, "Invalid API key", times=5)
    with pytest.raises(errors.Unauthenticated if code == status.Code.UNAUTHENTICATED else errors.PermissionDenied):
        client.status("digits")
    assert secure_backend.calls["status"] == 1


@pytest.mark.parametrize("status_code, body, reason", [
    (400, b"<html><head><title>400 No required SSL certificate was sent</title></head></html>",
     "the server requires a client certificate"),
    (400, b"<html><head><title>400 The SSL certificate error</title></head></html>",
     "the server refused the client certificate"),
    (496, b"", "the server requires a client certificate"),
    (495, b"", "the server refused the client certificate"),
])
def test_a_tls_gateway_refusing_the_client_certificate_over_http_is_a_tls_error(status_code, body, reason):
    import httpx

    response = httpx.Response(status_code, content=body,
                              request=httpx.Request("GET", "https://gateway.test/v1/models/m"))
    with pytest.raises(errors.TlsError, match=reason):
        answer_of(response)
    plain_400 = httpx.Response(400, content=b'{"error": "bad"}', request=response.request)
    with pytest.raises(errors.InvalidArgument):
        answer_of(plain_400)


def test_tls_arguments_are_checked_when_the_client_is_made(pki, tmp_path):
    with pytest.raises(ValueError, match="client_cert and client_key go together"):
        GrpcClient("127.0.0.1:1", client_cert=pki.cert("client"))
    with pytest.raises(ValueError, match="root_certificates is not PEM"):
        RestClient("https://127.0.0.1:1", root_certificates=b"not a certificate")
    with pytest.raises(ValueError, match="root_certificates: cannot read"):
        GrpcClient("127.0.0.1:1", root_certificates=tmp_path / "missing.pem")
    with pytest.raises(ValueError, match="need an https:// base_url"):
        RestClient("http://127.0.0.1:1", root_certificates=pki.ca)
    with pytest.raises(ValueError, match="not both"):
        GrpcClient("127.0.0.1:1", root_certificates=pki.ca, credentials=grpc.ssl_channel_credentials())
    with pytest.raises(ValueError, match="not a certificate and its private key"):
        RestClient("https://127.0.0.1:1", client_cert=pki.cert("client"), client_key=pki.key("server"))


@pytest.mark.asyncio
@pytest.mark.parametrize("cls", [AsyncGrpcClient, AsyncRestClient], ids=lambda c: c.__name__)
async def test_async_clients_take_the_same_tls_and_credential_arguments(secure, secure_backend, pki, cls):
    transport = "grpc" if cls is AsyncGrpcClient else "rest"
    async with cls(_address(secure, transport, mutual=True), root_certificates=pki.ca,
                   client_cert=pki.cert("client"), client_key=pki.key("client"), api_key="k-async") as client:
        outputs, versions = await asyncio.gather(client.predict("digits", INPUT), client.status("digits"))
    assert outputs["probabilities"].shape == (1, 10) and [v.version for v in versions] == [1, 2, 3]
    assert {headers["x-api-key"] for headers in secure_backend.headers} == {"k-async"}
    async with cls(_address(secure, transport, mutual=True), root_certificates=pki.ca, retry=PATIENT) as client:
        started = time.monotonic()
        with pytest.raises(errors.TlsError, match="client certificate"):
            await client.status("digits")
        assert time.monotonic() - started < BACKOFF


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "serving.client", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


def test_cli_speaks_mutual_tls_and_sends_the_api_key_from_the_environment(secure, secure_backend, pki, transport):
    where = "--grpc" if transport == "grpc" else "--rest"
    done = _cli("status", where, _address(secure, transport, mutual=True), "--model", "digits",
                "--root-certificates", str(pki.ca), "--client-cert", str(pki.cert("client")),
                "--client-key", str(pki.key("client")), "--server-name", "localhost",
                env={"TFS_API_KEY": "k-env"})
    assert done.returncode == 0, done.stderr
    assert [v["version"] for v in json.loads(done.stdout)] == [1, 2, 3]
    assert secure_backend.headers[-1]["x-api-key"] == "k-env"
    done = _cli("status", where, _address(secure, transport), "--model", "digits", "--root-certificates",
                str(pki.ca), "--api-key", "k-flag", "--bearer-token", "t-flag", env={"TFS_API_KEY": "k-env"})
    assert done.returncode == 0, done.stderr
    assert secure_backend.headers[-1]["x-api-key"] == "k-flag"
    assert secure_backend.headers[-1]["authorization"] == "Bearer t-flag"


def test_cli_reports_a_tls_failure_as_json_and_exits_1(secure, pki, transport):
    where = "--grpc" if transport == "grpc" else "--rest"
    done = _cli("status", where, _address(secure, transport), "--model", "digits",
                "--root-certificates", str(pki.rogue_ca))
    assert done.returncode == 1 and done.stdout == ""
    report = json.loads(done.stderr.strip().splitlines()[-1])  # after gRPC core's own log lines
    assert report["tls"] is True and report["code"] == "UNAVAILABLE"
    assert "the server's certificate is not trusted" in report["error"]


def test_cli_refuses_unusable_tls_files_before_calling(pki, tmp_path):
    done = _cli("status", "--rest", "http://127.0.0.1:1", "--model", "m", "--root-certificates", str(pki.ca))
    assert done.returncode == 2 and "need an https:// base_url" in done.stderr
