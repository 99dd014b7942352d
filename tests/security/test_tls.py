"""The embedded server's TLS, as TF Serving's: ``--ssl_config_file`` secures gRPC; REST stays plain HTTP.

Real ``python -m serving.server`` processes (``ServerProcess``) serve a tiny
SavedModel with certificates made by the test (``tests.support.pki``): one
with TLS, one with mutual TLS (``client_verify: true``). The SDK and the
official ``tensorflow_serving`` stubs call them; every process listens on
127.0.0.1 only (``--bind_address``'s default).
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import grpc
import numpy as np
import pytest

from serving import status
from serving.checkout import REPO_ROOT
from serving.client import GrpcClient, RestClient, RetryPolicy, errors
from serving.launcher import ServerProcess, free_port
from tests.support.config import Listener
from tests.support.pki import Pki, make_pki, ssl_config_text

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

X = np.array([[1.0, 2.0, 3.0]], np.float32)
BACKOFF = 5.0
# Any retry would wait BACKOFF seconds first: a failure sooner was tried once.
PATIENT = RetryPolicy(max_attempts=5, initial_backoff=BACKOFF, max_backoff=BACKOFF, jitter=0.0)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tiny_repo(tmp_path_factory) -> Path:
    from tests.support.models import export_tiny  # TensorFlow: exports the model

    root = tmp_path_factory.mktemp("repo")
    export_tiny(root / "tiny" / "1")
    return root


def _serve(workdir: Path, repo: Path, pki: Pki, *, client_verify: bool) -> ServerProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    ssl_config = workdir / "ssl.config"
    ssl_config.write_text(ssl_config_text(pki, client_verify=client_verify))
    return ServerProcess.for_models({"tiny": repo / "tiny"}, workdir=workdir,
                                    extra_flags=[f"--ssl_config_file={ssl_config}"], timeout=180)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory, tiny_repo, pki) -> Iterator[ServerProcess]:
    with _serve(tmp_path_factory.mktemp("tls"), tiny_repo, pki, client_verify=False) as server:
        yield server


@pytest.fixture(scope="module")
def mtls_server(tmp_path_factory, tiny_repo, pki) -> Iterator[ServerProcess]:
    with _serve(tmp_path_factory.mktemp("mtls"), tiny_repo, pki, client_verify=True) as server:
        yield server


def relay_to(port: int) -> Callable[[socket.socket], None]:
    """A ``Listener`` handler: each connection relayed to 127.0.0.1:``port``."""
    def relay(client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", port))
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pipe, args=(source, sink), daemon=True).start()
    return relay


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with source, sink:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass


def _official_predict(channel: grpc.Channel) -> np.ndarray:
    import tensorflow as tf  # TensorFlow: the official stubs' way to build a TensorProto
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    request = predict_pb2.PredictRequest()
    request.model_spec.name = "tiny"
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(X))
    response = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=30)
    return tf.make_ndarray(response.outputs["y"])


def test_sdk_predicts_over_tls_with_the_private_ca(tls_server, pki):
    with GrpcClient(tls_server.grpc_target, root_certificates=pki.ca) as client:
        np.testing.assert_allclose(client.predict("tiny", {"x": X})["y"], 2 * X)
        assert client.status("tiny")[0].state == "AVAILABLE"
    with GrpcClient(tls_server.grpc_target, root_certificates=pki.ca.read_bytes(), server_name="localhost") as client:
        np.testing.assert_allclose(client.predict("tiny", {"x": X})["total"], [12.0])


def test_official_stubs_predict_over_a_secure_channel(tls_server, pki):
    credentials = grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes())
    with grpc.secure_channel(tls_server.grpc_target, credentials) as channel:
        np.testing.assert_allclose(_official_predict(channel), 2 * X)


def test_the_grpc_port_speaks_only_tls(tls_server):
    with GrpcClient(tls_server.grpc_target, retry=PATIENT, timeout=3) as client:
        with pytest.raises(errors.Unavailable):
            client.status("tiny")


def test_rest_stays_plain_http_as_in_tf_serving(tls_server):
    with RestClient(tls_server.rest_url) as client:
        np.testing.assert_allclose(client.predict("tiny", {"x": X})["y"], 2 * X)


def test_an_untrusted_server_certificate_is_a_tls_error_after_one_connection(tls_server, pki):
    relay = Listener(relay_to(tls_server.grpc_port))
    retries = []
    policy = RetryPolicy(max_attempts=5, initial_backoff=BACKOFF, jitter=0.0,
                         on_retry=lambda *args: retries.append(args))
    started = time.monotonic()
    try:
        with GrpcClient(f"127.0.0.1:{relay.port}", root_certificates=pki.rogue_ca, server_name="localhost",
                        retry=policy) as client:
            with pytest.raises(errors.TlsError) as caught:
                client.predict("tiny", {"x": X})
    finally:
        relay.close()
    assert time.monotonic() - started < BACKOFF and retries == []
    assert relay.accepted == 1
    assert "the server's certificate is not trusted" in caught.value.details


def test_a_certificate_for_another_name_is_a_tls_error(tls_server, pki):
    with GrpcClient(tls_server.grpc_target, root_certificates=pki.ca, server_name="elsewhere.test",
                    retry=PATIENT) as client:
        with pytest.raises(errors.TlsError, match="does not carry the name dialled"):
            client.status("tiny")


def test_mutual_tls_with_a_client_certificate_succeeds_through_sdk_and_official_stubs(mtls_server, pki):
    with GrpcClient(mtls_server.grpc_target, root_certificates=pki.ca, client_cert=pki.cert("client"),
                    client_key=pki.key("client")) as client:
        np.testing.assert_allclose(client.predict("tiny", {"x": X})["y"], 2 * X)
    credentials = grpc.ssl_channel_credentials(pki.ca.read_bytes(), pki.key("client").read_bytes(),
                                               pki.cert("client").read_bytes())
    with grpc.secure_channel(mtls_server.grpc_target, credentials) as channel:
        np.testing.assert_allclose(_official_predict(channel), 2 * X)


@pytest.mark.parametrize("client_pair", [None, "rogue-client"], ids=["no-certificate", "untrusted-certificate"])
def test_mutual_tls_refuses_a_client_without_a_trusted_certificate(mtls_server, pki, client_pair):
    pair = {} if client_pair is None else {"client_cert": pki.cert(client_pair), "client_key": pki.key(client_pair)}
    started = time.monotonic()
    with GrpcClient(mtls_server.grpc_target, root_certificates=pki.ca, retry=PATIENT, **pair) as client:
        with pytest.raises(errors.TlsError) as caught:
            client.status("tiny")
    assert time.monotonic() - started < BACKOFF
    assert "requires a client certificate it trusts (client_cert=, client_key=)" in caught.value.details
    with grpc.secure_channel(mtls_server.grpc_target, grpc.ssl_channel_credentials(pki.ca.read_bytes())) as channel:
        with pytest.raises(grpc.RpcError) as official:
            _official_predict(channel)
    assert official.value.code() == grpc.StatusCode.UNAVAILABLE


def _listening(port: int) -> set[str]:
    """Local addresses in LISTEN state on ``port``, from /proc/net/tcp and tcp6 (IPv4-mapped ones as IPv4)."""
    found = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            host, port_hex = local.split(":")
            if state == "0A" and int(port_hex, 16) == port:  # 0A: TCP_LISTEN
                words = [bytes.fromhex(host[i:i + 8])[::-1] for i in range(0, len(host), 8)]
                address = socket.inet_ntop(family, b"".join(words))
                found.add(address.removeprefix("::ffff:"))  # an IPv4 address on a dual-stack socket
    return found


def _non_loopback_address() -> str | None:
    """This host's address on its default route, if it has one (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 9))
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def test_grpc_and_rest_listen_on_127_0_0_1_only_by_default(tls_server):
    for port in (tls_server.grpc_port, tls_server.rest_port):
        assert _listening(port) == {"127.0.0.1"}, port
    assert f"Running gRPC ModelServer at 127.0.0.1:{tls_server.grpc_port} (TLS)" in tls_server.log_tail(400)
    outside = _non_loopback_address()
    if outside is not None:
        for port in (tls_server.grpc_port, tls_server.rest_port):
            with pytest.raises(OSError):
                socket.create_connection((outside, port), timeout=2).close()


def _start_failure(*flags: str) -> str:
    result = subprocess.run([sys.executable, "-m", "serving.server", f"--port={free_port()}",
                             "--model_base_path=/nonexistent/model", *flags], cwd=REPO_ROOT,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 255, result.stderr
    return result.stderr


@pytest.mark.parametrize("config, message", [
    ('server_key: "/etc/tls/server.key"\nserver_cert: "/etc/tls/server.crt"\n',
     "SSLConfig.server_key must hold a PEM key (the text itself, not a file name)"),
    ("client_verify: true\n", "SSLConfig.server_key must hold a PEM key"),
    ("not a text proto", "--ssl_config_file: invalid SSLConfig text proto"),
])
def test_an_unusable_ssl_config_fails_the_start_before_any_model_loads(tmp_path, config, message):
    path = tmp_path / "ssl.config"
    path.write_text(config)
    assert message in _start_failure(f"--ssl_config_file={path}")


def test_client_verify_without_custom_ca_fails_the_start(tmp_path, pki):
    path = tmp_path / "ssl.config"
    path.write_text(ssl_config_text(pki, client_verify=True).replace("custom_ca:", "# custom_ca:"))
    assert "SSLConfig.client_verify needs custom_ca" in _start_failure(f"--ssl_config_file={path}")


def test_a_key_that_is_not_the_certificates_is_refused_when_binding(pki):
    from google.protobuf import text_format

    from serving.config.protos import ssl_config_class
    from serving.server.frontends.grpc import GrpcFrontend, server_credentials  # TensorFlow: the front-end

    config = text_format.Parse(ssl_config_text(pki), ssl_config_class()())
    config.server_key = pki.key("rogue-server").read_text()
    frontend = GrpcFrontend(None, ["127.0.0.1:0"], max_threads=1, credentials=server_credentials(config))
    with pytest.raises(status.InvalidArgument, match="is server_key the key of server_cert"):
        frontend.start()
