"""The SDK through the gateway with its own TLS and credential arguments, over gRPC and REST.

`root_certificates`, `client_cert`/`client_key` and `api_key` are the arguments a user passes; nothing
here builds channel credentials or headers by hand. Refusals come back as the SDK's own errors.
"""
from __future__ import annotations

import numpy as np
import pytest

from exporter.manifest import load_manifest
from serving.client import NO_RETRY, GrpcClient, RestClient
from serving.client.errors import PermissionDenied, ResourceExhausted, TlsError, Unauthenticated
from tests.support.gateway import MODEL, nginx_size

CLIENTS = {"grpc": lambda gw, **kw: GrpcClient(gw.grpc_target, **kw),
           "rest": lambda gw, **kw: RestClient(gw.rest_url, **kw)}


@pytest.fixture(params=sorted(CLIENTS))
def connect(request, gateway):
    """``connect(**kwargs)``: a client of the parametrized protocol to the gateway, trusting its CA."""
    def make(**kwargs):
        kwargs.setdefault("root_certificates", gateway.secrets.ca_cert)
        return CLIENTS[request.param](gateway, timeout=30, **kwargs)
    return make


def test_the_right_key_predicts_and_reads_status(connect, gateway, model_repo):
    inputs = load_manifest(model_repo / MODEL / "1").sample_inputs()
    with connect(api_key=gateway.key()) as client:
        assert client.status(MODEL)[0].state == "AVAILABLE"
        assert np.asarray(client.predict(MODEL, inputs)["classes"]).shape[0] == len(next(iter(inputs.values())))


@pytest.mark.parametrize("key", [None, "not-a-key"])
def test_no_key_or_a_wrong_one_is_unauthenticated(connect, key):
    with connect(api_key=key, retry=NO_RETRY) as client, pytest.raises(Unauthenticated):
        client.status(MODEL)


def test_a_reload_without_the_admin_key_is_permission_denied(gateway):
    with GrpcClient(gateway.grpc_target, root_certificates=gateway.secrets.ca_cert, api_key=gateway.key(),
                    retry=NO_RETRY) as client, pytest.raises(PermissionDenied):
        client.reload_config("model_config_list { }")


def test_over_the_rate_the_rest_client_gets_resource_exhausted(rate_gateway):
    gateway = rate_gateway
    burst = int(gateway.values["GATEWAY_BURST"])
    with RestClient(gateway.rest_url, root_certificates=gateway.secrets.ca_cert, api_key=gateway.key("burst-sdk"),
                    retry=NO_RETRY) as client, pytest.raises(ResourceExhausted):
        for _ in range(burst + 3):  # the first request and `burst` more pass; the bucket refills once a minute
            client.status(MODEL)


def test_a_body_over_the_limit_is_refused_before_tf_serving(gateway):
    rows = nginx_size(gateway.values["GATEWAY_MAX_BODY_SIZE"]) // (64 * 4) + 1
    images = np.zeros((rows, 8, 8, 1), np.float32)
    with RestClient(gateway.rest_url, root_certificates=gateway.secrets.ca_cert, api_key=gateway.key(),
                    retry=NO_RETRY) as client, pytest.raises(ResourceExhausted):
        client.predict(MODEL, {"images": images})


def test_an_untrusted_gateway_certificate_is_a_tls_error(connect, gateway, foreign_secrets):
    # Default retry policy: a TlsError must not be retried (it raises at once, not after backoff).
    with connect(root_certificates=foreign_secrets.ca_cert, api_key=gateway.key()) as client, \
            pytest.raises(TlsError):
        client.status(MODEL)


def test_the_mtls_port_refuses_a_client_without_a_certificate_and_serves_one_with_it(gateway):
    ca, creds = gateway.secrets.ca_cert, gateway.secrets
    with RestClient(gateway.mtls_url, root_certificates=ca, retry=NO_RETRY) as client, \
            pytest.raises((TlsError, Unauthenticated)):
        client.status(MODEL)
    with GrpcClient(gateway.mtls_target, root_certificates=ca, retry=NO_RETRY) as client, \
            pytest.raises((TlsError, Unauthenticated)):
        client.status(MODEL)
    certified = {"root_certificates": ca, "client_cert": creds.cert("client"), "client_key": creds.private_key("client")}
    with RestClient(gateway.mtls_url, **certified) as rest, GrpcClient(gateway.mtls_target, **certified) as grpc_client:
        assert rest.status(MODEL)[0].state == "AVAILABLE"
        assert grpc_client.status(MODEL)[0].state == "AVAILABLE"
