"""gRPC through the gateway (HTTP/2 over TLS, grpc_pass): the SDK's GrpcClient and the official stubs.

The gateway answers its own refusals with gRPC statuses: UNAUTHENTICATED (no or
unknown key), PERMISSION_DENIED (an admin call with a client key),
RESOURCE_EXHAUSTED (over the rate, or a message over the body limit).
"""
from __future__ import annotations

import grpc
import numpy as np
import pytest
from google.protobuf import text_format
from tensorflow_serving.apis import (
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from exporter.manifest import load_manifest
from serving.client import NO_RETRY, GrpcClient
from serving.client.errors import PermissionDenied, ResourceExhausted, ResponseTooLarge, Unauthenticated
from tests.support.gateway import MODEL, model_status, nginx_size, served_config


def sdk_client(gateway, key: str | None, **kwargs) -> GrpcClient:
    metadata = [("x-api-key", key)] if key is not None else []
    return GrpcClient(gateway.grpc_target, credentials=gateway.channel_credentials(), metadata=metadata,
                      retry=NO_RETRY, timeout=30.0, **kwargs)


def reload_request(config_text: str) -> model_management_pb2.ReloadConfigRequest:
    request = model_management_pb2.ReloadConfigRequest()
    text_format.Parse(config_text, request.config)
    return request


def test_the_client_key_predicts_through_the_sdk(gateway, model_repo):
    inputs = load_manifest(model_repo / MODEL / "1").sample_inputs()
    with sdk_client(gateway, gateway.key()) as client:
        outputs = client.predict(MODEL, inputs)
        assert outputs and all(v.shape[0] == 1 for v in outputs.values())
        assert client.status(MODEL)[0].state == "AVAILABLE"


def test_a_bearer_token_works_with_the_official_stubs(gateway):
    with grpc.secure_channel(gateway.grpc_target, gateway.channel_credentials()) as channel:
        response = model_status(channel, [("authorization", f"Bearer {gateway.key()}")])
    assert response.model_version_status[0].state == 30  # AVAILABLE


@pytest.mark.parametrize("metadata", [[], [("x-api-key", "wrong")], [("authorization", "Bearer wrong")]],
                         ids=["none", "wrong-key", "wrong-bearer"])
def test_no_key_or_a_wrong_one_is_unauthenticated(gateway, metadata):
    with grpc.secure_channel(gateway.grpc_target, gateway.channel_credentials()) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            model_status(channel, metadata)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert caught.value.details() == "missing or unknown API key or client certificate"


def test_the_sdk_raises_unauthenticated_for_a_wrong_key(gateway):
    with sdk_client(gateway, "wrong") as client, pytest.raises(Unauthenticated):
        client.status(MODEL)


def test_a_reload_needs_the_admin_key(gateway):
    config = served_config(gateway)
    with sdk_client(gateway, gateway.key()) as client, pytest.raises(PermissionDenied, match="admin credential"):
        client.reload_config(config)
    with grpc.secure_channel(gateway.grpc_target, gateway.channel_credentials()) as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.HandleReloadConfigRequest(reload_request(config), metadata=[("x-api-key", gateway.key())],
                                           timeout=30)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with sdk_client(gateway, gateway.key("admin")) as admin:
        admin.reload_config(config)
        assert admin.status(MODEL)[0].state == "AVAILABLE"


def test_over_the_rate_a_client_gets_resource_exhausted(rate_gateway):
    gateway = rate_gateway
    burst = int(gateway.values["GATEWAY_BURST"])
    codes = []
    with grpc.secure_channel(gateway.grpc_target, gateway.channel_credentials()) as channel:
        for _ in range(burst + 3):  # the first request and `burst` more pass; the bucket refills once a minute
            try:
                model_status(channel, [("x-api-key", gateway.key("burst-grpc"))])
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as error:
                codes.append(error.code())
                details = error.details()
                break
        assert codes[-1] == grpc.StatusCode.RESOURCE_EXHAUSTED, codes[-3:]
        assert set(codes[:-1]) == {grpc.StatusCode.OK} and burst + 1 <= len(codes) - 1 <= burst + 2
        assert details.startswith("rate or concurrency limit")
        assert model_status(channel, [("x-api-key", gateway.key())]).model_version_status  # per client


def test_a_message_over_the_body_limit_is_resource_exhausted(gateway):
    limit = nginx_size(gateway.values["GATEWAY_MAX_BODY_SIZE"])
    request = predict_pb2.PredictRequest()
    request.model_spec.name = MODEL
    request.inputs["images"].dtype = 7  # DT_STRING
    request.inputs["images"].string_val.append(b"0" * (limit + 1))
    with grpc.secure_channel(gateway.grpc_target, gateway.channel_credentials()) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.Predict(request, metadata=[("x-api-key", gateway.key())], timeout=60)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # The gateway and the server behind it hold requests to the same size: whichever reads the message's
    # length first refuses it, the gateway with its text, the server with grpc core's "SERVER: ...".
    with sdk_client(gateway, gateway.key(), max_message_bytes=2 * limit) as client, \
            pytest.raises(ResourceExhausted, match="request larger than|SERVER: Received message larger") as refused:
        client.predict(MODEL, {"images": np.zeros((limit // 256 + 1, 8, 8, 1), "float32")})
    assert not isinstance(refused.value, ResponseTooLarge)


def test_a_client_that_does_not_trust_the_gateways_ca_fails_the_handshake(gateway, foreign_secrets):
    credentials = gateway.channel_credentials(ca=foreign_secrets.ca_cert)
    with grpc.secure_channel(gateway.grpc_target, credentials) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            model_status(channel, [("x-api-key", gateway.key())])
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "handshake" in caught.value.details().lower() or "ssl" in caught.value.details().lower()
