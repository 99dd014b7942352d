"""The mutual-TLS port: a client certificate of the local CA is the credential; none, or another CA's, is refused.

The certificate's OU names the role (client or admin), as ``make certs`` issues them.
"""
from __future__ import annotations

import grpc
import pytest

from serving.client import NO_RETRY, GrpcClient
from serving.client.errors import PermissionDenied
from tests.support.gateway import MODEL, model_status, served_config

STATUS = f"/v1/models/{MODEL}"
METRICS = "/monitoring/prometheus/metrics"


def test_rest_without_a_client_certificate_is_refused(gateway):
    with gateway.http() as http:
        response = http.get(gateway.mtls_url + STATUS)
    assert response.status_code == 401
    assert response.json() == {"error": "missing or unknown API key or client certificate"}


def test_rest_with_another_cas_client_certificate_is_refused(gateway, foreign_secrets):
    with gateway.http(cert="admin", creds=foreign_secrets) as http:
        assert http.get(gateway.mtls_url + METRICS).status_code == 401


def test_rest_with_a_client_certificate_is_served_and_its_role_applies(gateway):
    with gateway.http(cert="client") as http:
        assert http.get(gateway.mtls_url + STATUS).status_code == 200
        assert http.get(gateway.mtls_url + METRICS).status_code == 403
    with gateway.http(cert="admin") as http:
        assert http.get(gateway.mtls_url + METRICS).status_code == 200
    expected = {("client", 200), ("client", 403), ("admin", 200)}

    def names(entries: list[dict]) -> set[tuple[str, int]]:
        return {(e["client"], e["status"]) for e in entries if e["port"] == str(gateway.ports["mtls"])}

    assert expected <= names(gateway.access_entries(until=lambda entries: expected <= names(entries)))


def test_grpc_without_a_client_certificate_is_unauthenticated(gateway):
    with grpc.secure_channel(gateway.mtls_target, gateway.channel_credentials()) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            model_status(channel, [])
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_grpc_with_a_client_certificate_is_served_and_reloads_need_an_admin_certificate(gateway):
    with grpc.secure_channel(gateway.mtls_target, gateway.channel_credentials(cert="client")) as channel:
        assert model_status(channel, []).model_version_status[0].state == 30  # AVAILABLE
    config = served_config(gateway)
    with GrpcClient(gateway.mtls_target, credentials=gateway.channel_credentials(cert="client"),
                    retry=NO_RETRY) as client, pytest.raises(PermissionDenied):
        client.reload_config(config)
    with GrpcClient(gateway.mtls_target, credentials=gateway.channel_credentials(cert="admin"),
                    retry=NO_RETRY) as admin:
        admin.reload_config(config)
        assert admin.status(MODEL)[0].state == "AVAILABLE"
