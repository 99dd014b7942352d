"""The SDK's public surface is pinned, and importing it loads no TensorFlow."""
from __future__ import annotations

import inspect
import json
import subprocess
import sys

from serving.checkout import REPO_ROOT
import serving.client
import serving.client.errors
import serving.codec
import serving.status


def test_public_names_are_pinned():
    assert serving.client.__all__ == [
        "GrpcClient", "RestClient", "AsyncGrpcClient", "AsyncRestClient", "RetryPolicy", "NO_RETRY",
        "ModelMetadata", "Signature", "TensorSpec", "VersionStatus", "ServingError", "errors",
        "Connection", "add_connection_arguments", "connection_from_args"]
    for name in serving.client.__all__:
        assert getattr(serving.client, name) is not None


def test_error_tree_is_serving_status_plus_the_sdks_tls_error():
    for name in serving.client.errors.__all__:
        if name not in ("TlsError", "ResponseTooLarge"):
            assert getattr(serving.client.errors, name) is getattr(serving.status, name)
    tls_error = serving.client.errors.TlsError
    assert issubclass(tls_error, serving.status.ServingError) and not issubclass(tls_error, serving.status.Unavailable)
    assert tls_error("x").code == serving.status.Code.UNAVAILABLE  # what gRPC reports; never retried all the same
    too_large = serving.client.errors.ResponseTooLarge
    assert issubclass(too_large, serving.status.ResourceExhausted)


SECURITY_ARGUMENTS = ["root_certificates", "client_cert", "client_key", "server_name", "api_key", "bearer_token"]


def test_every_client_takes_the_same_tls_and_credential_arguments():
    for cls in (serving.client.GrpcClient, serving.client.RestClient,
                serving.client.AsyncGrpcClient, serving.client.AsyncRestClient):
        parameters = inspect.signature(cls.__init__).parameters
        for name in SECURITY_ARGUMENTS:
            assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, (cls.__name__, name)
            assert parameters[name].default is None, (cls.__name__, name)


def test_signature_types_are_the_codecs_shared_with_the_server_and_the_exporter():
    assert serving.client.TensorSpec is serving.codec.TensorSpec
    assert serving.client.Signature is serving.codec.Signature


def test_sync_and_async_clients_have_the_same_methods():
    names = ["predict", "classify", "regress", "metadata", "status", "reload_config"]
    signatures = {cls.__name__: [inspect.signature(getattr(cls, n)) for n in names]
                  for cls in (serving.client.GrpcClient, serving.client.RestClient,
                              serving.client.AsyncGrpcClient, serving.client.AsyncRestClient)}
    assert len({tuple(map(str, s)) for s in signatures.values()}) == 1


def test_importing_the_client_loads_neither_tensorflow_nor_tensorflow_serving():
    code = ("import sys, json; import serving.client; from serving.client import GrpcClient, RestClient; "
            "GrpcClient('127.0.0.1:1').close(); RestClient('http://127.0.0.1:1').close(); "
            "print(json.dumps(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('tensorflow', 'tensorflow_serving', 'keras', 'tf_keras'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
