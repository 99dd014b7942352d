"""gRPC is bounded by bytes the way REST is: the receive limit holds once a message is inflated from gzip, and a
Predict's tensors may not hold more once decoded than a message of that size could carry (string broadcasts)."""
from __future__ import annotations

from typing import Iterator

import grpc
import numpy as np
import pytest
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from serving import codec
from serving.server.frontends.dataplane import DataPlane
from serving.server.frontends.grpc import GrpcFrontend

LIMIT = 1 << 20


@pytest.fixture
def limited(dataplane: DataPlane) -> Iterator[str]:
    frontend = GrpcFrontend(dataplane, ["127.0.0.1:0"], max_threads=4, max_receive_message_bytes=LIMIT)
    frontend.start()
    yield f"127.0.0.1:{frontend.bound_ports[0]}"
    frontend.stop(grace=1)


def _strings(values: list[bytes], shape: list[int]) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name, request.model_spec.signature_name = "tiny", "strings"
    tensor = request.inputs["s"]
    tensor.dtype = 7
    for size in shape:
        tensor.tensor_shape.dim.add().size = size
    tensor.string_val.extend(values)
    return request


def test_a_string_broadcast_past_the_receive_limit_is_refused_naming_the_flag(limited):
    request = _strings([b"a" * 100_000], [1000])   # a 98 KiB message that decodes to 100 MB
    with grpc.insecure_channel(limited) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=30)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "--grpc_max_receive_message_bytes" in refused.value.details()
    assert "100024000 bytes once decoded" in refused.value.details()


def test_many_short_strings_within_the_receive_limit_are_served(limited):
    request = _strings([b"ab"] * 100_000, [100_000])   # 400 KB sent, 3.4 MB as TensorFlow strings
    with grpc.insecure_channel(limited) as channel:
        response = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=30)
    assert codec.tensor_proto_to_ndarray(response.outputs["length"]).tolist() == [2] * 100_000


def test_a_gzip_message_inflating_past_the_receive_limit_is_resource_exhausted(limited):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "tiny"
    codec.ndarray_to_tensor_proto(np.zeros((200_000, 3), np.float32), request.inputs["x"], use_tensor_content=True)
    with grpc.insecure_channel(limited, compression=grpc.Compression.Gzip) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=30)
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED   # 2.4 MB inflated from about 2 KB
