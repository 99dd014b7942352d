"""Capture in the one data plane, in process: both front-ends over a DataPlane with a ServerRequestCapture.

Real gRPC and REST front-ends on free ports, the real tiny model; the writer
thread is held with an Event where a test needs it behind.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from tensorflow_serving.apis import (
    classification_pb2,
    inference_pb2,
    predict_pb2,
    prediction_log_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from serving import codec
from serving.capture import read_capture
from serving.server.frontends.dataplane import DataPlane, ModelSpec
from serving.server.frontends.grpc import GrpcFrontend
from serving.server.frontends.rest import RestFrontend
from serving.launcher import free_port
from serving.server.metrics import CaptureMetrics, ServerMetrics, render_registry
from serving.server.request_capture import CaptureSettings, ServerRequestCapture
from tests.support.serving import MONITORING_PATH, examples_input

X = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0]], np.float32)
ROWS = [{"x": [1.0, 2.0, 3.0]}, {"x": [0.0, 0.0, 1.0]}]


class Served:
    def __init__(self, capture: ServerRequestCapture, stub, rest_url: str, metrics: ServerMetrics):
        self.capture, self.stub, self.rest_url, self.metrics = capture, stub, rest_url, metrics

    def predict(self, x: np.ndarray = X, **metadata: str) -> predict_pb2.PredictResponse:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "tiny"
        codec.ndarray_to_tensor_proto(x, request.inputs["x"])
        return self.stub.Predict(request, timeout=30, metadata=tuple(metadata.items()) or None)


@contextlib.contextmanager
def _serve(tiny_manager, directory: Path, **settings) -> Iterator[Served]:
    capture = ServerRequestCapture(CaptureSettings(str(directory), **{"sample_rate": 1.0, "max_bytes": 1 << 30,
                                                                      **settings}))
    capture.start()
    metrics = ServerMetrics(CollectorRegistry())
    CaptureMetrics(capture.counts, metrics.registry)
    dataplane = DataPlane(tiny_manager, metrics, capture=capture)
    grpc_frontend = GrpcFrontend(dataplane, ["127.0.0.1:0"], max_threads=8)
    grpc_frontend.start()
    port = free_port()
    rest = RestFrontend(dataplane, port=port, host="127.0.0.1", num_threads=4, monitoring_path=MONITORING_PATH,
                        metrics=metrics)
    rest.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_frontend.bound_ports[0]}")
    try:
        yield Served(capture, prediction_service_pb2_grpc.PredictionServiceStub(channel), f"http://127.0.0.1:{port}",
                     metrics)
    finally:
        channel.close()
        rest.stop(grace=1)
        grpc_frontend.stop(grace=1)
        capture.stop()


@pytest.fixture
def served(tiny_manager, tmp_path: Path) -> Iterator[Served]:
    with _serve(tiny_manager, tmp_path / "capture") as running:
        yield running


def test_rest_and_grpc_of_the_same_rows_give_the_same_record(served: Served, tmp_path: Path):
    served.predict()
    reply = httpx.post(f"{served.rest_url}/v1/models/tiny:predict", json={"instances": X.tolist()}, timeout=30)
    assert reply.status_code == 200
    served.capture.stop()
    grpc_record, rest_record = list(read_capture(tmp_path / "capture"))
    assert grpc_record.log.predict_log.SerializeToString() == rest_record.log.predict_log.SerializeToString()
    assert (grpc_record.model, grpc_record.version, grpc_record.signature, grpc_record.method) == (
        "tiny", 1, "serving_default", "predict")
    np.testing.assert_array_equal(grpc_record.inputs()["x"], X)
    np.testing.assert_array_equal(codec.tensor_proto_to_ndarray(grpc_record.response.outputs["y"]), 2 * X)
    assert grpc_record.request_id != rest_record.request_id and len(grpc_record.request_id) == 16
    assert grpc_record.origin == "embedded-server"


def test_classify_regress_and_multi_inference_are_captured_with_responses(served: Served, tmp_path: Path):
    classify = classification_pb2.ClassificationRequest(input=examples_input(ROWS))
    classify.model_spec.name, classify.model_spec.signature_name = "tiny", "classification"
    classified = served.stub.Classify(classify, timeout=30)
    regress = regression_pb2.RegressionRequest(input=examples_input(ROWS))
    regress.model_spec.name, regress.model_spec.signature_name = "tiny", "regression"
    served.stub.Regress(regress, timeout=30)
    multi = inference_pb2.MultiInferenceRequest(input=examples_input(ROWS))
    for signature, method in (("classification", "tensorflow/serving/classify"),
                              ("regression", "tensorflow/serving/regress")):
        task = multi.tasks.add(method_name=method)
        task.model_spec.name, task.model_spec.signature_name = "tiny", signature
    served.stub.MultiInference(multi, timeout=30)
    reply = httpx.post(f"{served.rest_url}/v1/models/tiny:classify",
                       json={"signature_name": "classification", "examples": ROWS}, timeout=30)
    assert reply.status_code == 200
    served.capture.stop()
    records = list(read_capture(tmp_path / "capture"))
    assert [(r.method, r.signature) for r in records] == [
        ("classify", "classification"), ("regress", "regression"),
        ("multi_inference", "classification,regression"), ("classify", "classification")]
    # TF Serving's own messages read the same records; the gRPC and REST Classify recorded the same examples.
    official = [prediction_log_pb2.PredictionLog.FromString(r.log.SerializeToString()) for r in records]
    assert official[0].classify_log.request.input == classify.input
    assert official[0].classify_log.response.result == classified.result
    assert official[3].classify_log.request.input == classify.input
    assert len(official[1].regress_log.response.result.regressions) == 2
    assert [r.WhichOneof("result") for r in official[2].multi_inference_log.response.results] == [
        "classification_result", "regression_result"]


def test_a_full_queue_drops_and_counts_and_never_delays_a_request(tiny_manager, tmp_path: Path):
    with _serve(tiny_manager, tmp_path / "capture", queue_records=4) as served:
        writer = served.capture.writer
        entered, release = threading.Event(), threading.Event()
        write = writer.write

        def held_write(log):  # the writer thread, held behind the first record
            entered.set()
            assert release.wait(60)
            return write(log)

        writer.write = held_write  # type: ignore[method-assign]
        try:
            served.predict()
            assert entered.wait(30)  # the writer thread holds record 1; the queue is empty
            with ThreadPoolExecutor(8) as pool:  # every request answers while the writer is held
                answers = list(pool.map(lambda _: served.predict(), range(19)))
            assert len(answers) == 19 and not release.is_set()
            counts = served.capture.counts().records
            assert counts["dropped_queue_full"] == 15  # 4 wait in the queue
            page = render_registry(served.metrics.registry).decode()
            assert ':tensorflow:serving:request_capture_records{outcome="dropped_queue_full"} 15' in page
        finally:
            release.set()
        served.capture.stop()
        assert served.capture.counts().records["written"] == 5
        assert len(list(read_capture(tmp_path / "capture"))) == 5


def test_metadata_and_api_keys_are_never_recorded(served: Served, tmp_path: Path):
    served.predict(**{"x-api-key": "SECRET-API-KEY-42", "authorization": "Bearer TOKEN-XYZZY"})
    reply = httpx.post(f"{served.rest_url}/v1/models/tiny:predict", json={"instances": X.tolist()}, timeout=30,
                       headers={"x-api-key": "SECRET-API-KEY-42", "Authorization": "Bearer TOKEN-XYZZY",
                                "Cookie": "session=COOKIE-PLUGH"})
    assert reply.status_code == 200
    served.capture.stop()
    data = b"".join(p.read_bytes() for p in (tmp_path / "capture").iterdir())
    assert len(list(read_capture(tmp_path / "capture"))) == 2
    for secret in (b"SECRET-API-KEY-42", b"TOKEN-XYZZY", b"COOKIE-PLUGH", b"x-api-key", b"authorization", b"Bearer"):
        assert secret.lower() not in data.lower()


class _BrokenCapture:
    """A RequestCapture whose submit fails: the data plane must still answer."""

    def __init__(self) -> None:
        self.offered: list[str] = []

    def offer(self, model_name: str) -> bool:
        self.offered.append(model_name)
        return True

    def submit(self, call) -> None:
        raise RuntimeError("capture is broken")


def test_a_failing_capture_never_fails_the_request(tiny_manager, caplog):
    capture = _BrokenCapture()
    dataplane = DataPlane(tiny_manager, capture=capture)
    answer = dataplane.predict(ModelSpec("tiny"), {"x": X})
    np.testing.assert_array_equal(answer.outputs["y"], 2 * X)
    assert capture.offered == ["tiny"]
    assert "Request capture failed for model tiny; the request is answered" in caplog.text
