"""Front-ends in process: bounded admission, the tensor element cap, and INTERNAL errors without Python internals.

The data plane is the real one over the real ``tiny`` model; a gate (events, no
sleeps) holds a call inside the front-end where a test needs one in flight.
"""
from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from typing import Any, Iterator

import grpc
import httpx
import numpy as np
import pytest
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from serving import codec
from serving.server.frontends.dataplane import DataPlane
from serving.server.frontends.grpc import GrpcFrontend
from serving.server.frontends.rest import RestFrontend
from serving.launcher import free_port

WAIT = 60.0
INTERNAL_MESSAGE = re.compile(r"Internal error while (running the model|handling \S+) "
                              r"\(request id ([0-9a-f]{16})\); see the server log")


class GatedDataPlane(DataPlane):
    """The real data plane; ``predict`` waits at a gate, after saying it has been entered."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entered = threading.Event()
        self.release = threading.Event()

    def predict(self, *args: Any, **kwargs: Any):
        self.entered.set()
        assert self.release.wait(WAIT)
        return super().predict(*args, **kwargs)


class ExplodingServable:
    """The real servable, but its run fails as numpy does when asked for a tensor that cannot fit."""

    def __init__(self, servable: Any) -> None:
        self._servable = servable

    def __getattr__(self, name: str) -> Any:
        return getattr(self._servable, name)

    def run(self, *args: Any) -> Any:
        raise MemoryError("Unable to allocate 238. GiB for an array with shape (1000000, 8, 8, 1000)")


class ExplodingManager:
    """A ``ModelManager`` handing out ``ExplodingServable``s of the real manager's servables."""

    def __init__(self, manager: Any) -> None:
        self._manager = manager

    @contextlib.contextmanager
    def acquire(self, name: str, version=None, label=None) -> Iterator[ExplodingServable]:
        with self._manager.acquire(name, version=version, label=label) as servable:
            yield ExplodingServable(servable)

    def model_status(self, name: str, version=None):
        return self._manager.model_status(name, version)

    def reload_config(self, config, timeout=None, caller_gone=None) -> None:
        self._manager.reload_config(config, timeout, caller_gone)

    def serves(self, name: str) -> bool:
        return self._manager.serves(name)


@contextlib.contextmanager
def serving_grpc(dataplane: DataPlane, **options: Any) -> Iterator[prediction_service_pb2_grpc.PredictionServiceStub]:
    frontend = GrpcFrontend(dataplane, ["127.0.0.1:0"], **{"max_threads": 4, **options})
    frontend.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{frontend.bound_ports[0]}") as channel:
            yield prediction_service_pb2_grpc.PredictionServiceStub(channel)
    finally:
        frontend.stop(grace=1)


@contextlib.contextmanager
def serving_rest(dataplane: DataPlane, **options: Any) -> Iterator[str]:
    port = free_port()
    frontend = RestFrontend(dataplane, port=port, host="127.0.0.1", num_threads=2, **options)
    frontend.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        frontend.stop(grace=1)


def predict_request(x: Any) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "tiny"
    if isinstance(x, np.ndarray):
        codec.ndarray_to_tensor_proto(x, request.inputs["x"])
    else:  # a shape, filled from one float as TensorFlow broadcasts it
        request.inputs["x"].dtype = 1
        for size in x:
            request.inputs["x"].tensor_shape.dim.add().size = size
        request.inputs["x"].float_val.append(1.0)
    return request


def test_calls_past_max_concurrent_rpcs_are_refused_at_once_with_resource_exhausted(tiny_manager, metrics):
    dataplane = GatedDataPlane(tiny_manager, metrics)
    with serving_grpc(dataplane, max_concurrent_rpcs=1) as stub:
        held = stub.Predict.future(predict_request(np.ones((1, 3), np.float32)), timeout=WAIT)
        assert dataplane.entered.wait(WAIT)   # the one admitted call is inside the server
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as refused:
            stub.Predict(predict_request(np.ones((1, 3), np.float32)), timeout=WAIT)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert time.monotonic() - started < 5.0   # refused, not queued behind the held call
        dataplane.release.set()
        np.testing.assert_array_equal(codec.tensor_proto_to_ndarray(held.result(WAIT).outputs["y"]), [[2, 2, 2]])
        assert admitted_soon(stub), "the slot must be free again once the held call has finished"


def admitted_soon(stub: prediction_service_pb2_grpc.PredictionServiceStub) -> bool:
    """Whether a call is admitted within a few seconds (grpc frees the slot just after the reply is sent)."""
    end = time.monotonic() + 5.0
    while True:
        try:
            stub.Predict(predict_request(np.ones((1, 3), np.float32)), timeout=WAIT)
            return True
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > end:
                return False


def test_grpc_tensors_past_max_tensor_elements_are_invalid_argument(dataplane):
    with serving_grpc(dataplane, max_tensor_elements=300) as stub:
        with pytest.raises(grpc.RpcError) as refused:
            stub.Predict(predict_request([1_000_000, 3]), timeout=WAIT)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "3000000 elements" in refused.value.details()
        assert "limit of 300 elements per request (embedded server flag --max_tensor_elements)" in \
            refused.value.details()
        response = stub.Predict(predict_request([100, 3]), timeout=WAIT)   # 300 elements: allowed
        assert codec.tensor_proto_to_ndarray(response.outputs["y"]).shape == (100, 3)


def test_rest_tensors_past_max_tensor_elements_are_400(dataplane):
    with serving_rest(dataplane, max_tensor_elements=300) as url:
        refused = httpx.post(f"{url}/v1/models/tiny:predict", json={"instances": [[1.0, 2.0, 3.0]] * 101},
                             timeout=WAIT)
        assert refused.status_code == 400 and "--max_tensor_elements" in refused.json()["error"]
        assert httpx.post(f"{url}/v1/models/tiny:predict", json={"instances": [[1.0, 2.0, 3.0]] * 100},
                          timeout=WAIT).status_code == 200


def test_a_python_failure_in_the_model_run_is_internal_with_a_request_id_and_no_python_text(
        tiny_manager, metrics, caplog):
    dataplane = DataPlane(ExplodingManager(tiny_manager), metrics)
    with caplog.at_level(logging.ERROR), serving_grpc(dataplane) as stub, serving_rest(dataplane) as url:
        with pytest.raises(grpc.RpcError) as failed:
            stub.Predict(predict_request(np.ones((1, 3), np.float32)), timeout=WAIT)
        rest = httpx.post(f"{url}/v1/models/tiny:predict", json={"instances": [[1.0, 2.0, 3.0]]}, timeout=WAIT)
    assert failed.value.code() == grpc.StatusCode.INTERNAL and rest.status_code == 500
    for message in (failed.value.details(), rest.json()["error"]):
        match = INTERNAL_MESSAGE.fullmatch(message)
        assert match and match.group(1) == "running the model", message
        assert "MemoryError" not in message and "GiB" not in message
        logged = [r for r in caplog.records if match.group(2) in r.getMessage()]
        assert logged and "MemoryError: Unable to allocate 238. GiB" in caplog.text
        assert logged[0].exc_info is not None   # the traceback goes to the log


def test_a_python_failure_in_a_handler_is_internal_naming_the_method(tiny_manager, metrics, caplog):
    class BrokenDataPlane(DataPlane):
        def predict(self, *args: Any, **kwargs: Any):
            raise KeyError("secret internal state")

    with caplog.at_level(logging.ERROR), serving_grpc(BrokenDataPlane(tiny_manager, metrics)) as stub:
        with pytest.raises(grpc.RpcError) as failed:
            stub.Predict(predict_request(np.ones((1, 3), np.float32)), timeout=WAIT)
    match = INTERNAL_MESSAGE.fullmatch(failed.value.details())
    assert failed.value.code() == grpc.StatusCode.INTERNAL and match and match.group(1) == "handling Predict"
    assert "KeyError" not in failed.value.details() and "secret" not in failed.value.details()
    assert "secret internal state" in caplog.text and match.group(2) in caplog.text
