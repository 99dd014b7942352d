"""TF Serving's ``model_servers/model_service_impl.cc`` (2.17.1; it has no test file of its own): its
``HandleReloadConfigRequest`` contract, checked over gRPC on the TF Serving test-model server.

The reload re-sends the server's own config (nothing changes, other tests keep their models).
"""
from __future__ import annotations

import grpc
from google.protobuf import text_format
from tensorflow_serving.apis import model_management_pb2, model_service_pb2_grpc
from tensorflow_serving.config import model_server_config_pb2

from tests.support.contract.tfs_grpc import RPC_TIMEOUT


def same_config(endpoint) -> model_server_config_pb2.ModelServerConfig:
    return text_format.Parse((endpoint.repo / "models.config").read_text(), model_server_config_pb2.ModelServerConfig())


def test_metric_names_are_answered_one_metric_each(tfs_testdata, tfs_channel):
    """HandleReloadConfigRequest: each requested metric name gets a Metric (name, int64_value_increase);
    an unknown name increases by 0 (GetMetrics: value 0 when the registry has none)."""
    request = model_management_pb2.ReloadConfigRequest(config=same_config(tfs_testdata))
    request.metric_names.extend(["/tensorflow/serving/request_count", "/no/such/metric"])
    response = model_service_pb2_grpc.ModelServiceStub(tfs_channel).HandleReloadConfigRequest(
        request, timeout=RPC_TIMEOUT)
    assert response.status.error_code == 0
    assert sorted(m.name for m in response.metric) == ["/no/such/metric", "/tensorflow/serving/request_count"]
    assert {m.name: m.int64_value_increase for m in response.metric}["/no/such/metric"] == 0


def test_a_custom_model_config_is_invalid_argument(tfs_channel):
    """HandleReloadConfigRequest: only a ModelConfigList is supported."""
    request = model_management_pb2.ReloadConfigRequest()
    request.config.custom_model_config.type_url = "type.googleapis.com/x"
    try:
        model_service_pb2_grpc.ModelServiceStub(tfs_channel).HandleReloadConfigRequest(request, timeout=RPC_TIMEOUT)
    except grpc.RpcError as error:
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "Only ModelConfigList is currently supported" in error.details()
    else:
        raise AssertionError("a custom_model_config reload was accepted")
