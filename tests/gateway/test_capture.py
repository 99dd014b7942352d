"""Request capture at the gateway: nginx's mirror copies inference requests to the capture service.

Debian's nginx with the repository's templates (GATEWAY_CAPTURE=on, the capture upstream set to a local
port) in front of the embedded server, and on that port either the real capture service
(``python -m serving.capture.gateway_sink``, a child process) or a stub that records every byte nginx
sends it (to show that no credential leaves the gateway).
"""
from __future__ import annotations

import asyncio
import contextlib
import gzip
import math
import struct
import threading
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from benchmarks.capture_gateway import SinkProcess, drive, predict_bodies
from serving.capture import read_capture
from serving.capture._tfrecord import iter_records
from serving.capture.gateway_sink import (
    CaptureSink,
    parse_mirrored,
    parse_models,
    parse_rate,
    to_prediction_log,
)
from serving.launcher import free_port
from serving.wire import apis
from tests.support.gateway import (
    MODEL,
    Gateway,
    compose_values,
    running_gateway,
    upstream_values,
)

UNLIMITED = {"GATEWAY_RATE": "1000000r/s", "GATEWAY_BURST": "1000000"}


@contextlib.contextmanager
def capture_gateway(nginx, nginx_version, secrets, env, tf_serving, root: Path, sink_port: int,
                    capture: str = "on") -> Iterator[Gateway]:
    values = {**compose_values(env, **upstream_values(tf_serving), GATEWAY_CAPTURE_UPSTREAM=f"127.0.0.1:{sink_port}"),
              **UNLIMITED, "GATEWAY_CAPTURE": capture}
    with running_gateway(nginx, nginx_version, values, root, secrets, tf_serving) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def sink_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def cgateway(nginx, nginx_version, gateway_secrets, compose_gateway_env, tf_serving, tmp_path_factory,
             sink_port) -> Iterator[Gateway]:
    with capture_gateway(nginx, nginx_version, gateway_secrets, compose_gateway_env, tf_serving,
                         tmp_path_factory.mktemp("capture-gateway"), sink_port) as gateway:
        yield gateway


@contextlib.contextmanager
def sink(gateway: Gateway, port: int, root: Path, rate: str, *extra: str) -> Iterator[SinkProcess]:
    (root / "capture").mkdir(parents=True, exist_ok=True)
    process = SinkProcess(port, root / "capture", f"http://127.0.0.1:{gateway.upstream.rest_port}", rate,
                          root / "sink.log", extra).start()
    try:
        yield process
    finally:
        process.stop()


def load(gateway: Gateway, protocol: str, **kwargs):
    return drive(protocol, rest_url=gateway.rest_url, grpc_target=gateway.grpc_target, ca=gateway.secrets.ca_cert,
                 api_key=gateway.key("loadtest"), **kwargs)


def predictions_logged(gateway: Gateway, before: int, count: int) -> list[dict]:
    """The access-log entries of inference calls after the first ``before`` lines, once ``count`` are there."""
    def inference(entries: list[dict]) -> list[dict]:
        return [e for e in entries[before:] if e["uri"].endswith((":predict", "/Predict"))]
    return inference(gateway.access_entries(lambda entries: len(inference(entries)) >= count, timeout=10))


# -- off by default ---------------------------------------------------------------------------------------
def test_capture_is_off_in_compose_and_then_no_request_leaves_the_gateway(
        nginx, nginx_version, gateway_secrets, compose_gateway_env, tf_serving, tmp_path):
    assert compose_gateway_env["GATEWAY_CAPTURE"] == "off"
    port = free_port()
    with capture_gateway(nginx, nginx_version, gateway_secrets, compose_gateway_env, tf_serving, tmp_path / "gw",
                         port, capture="off") as gateway, sink(gateway, port, tmp_path, "1") as service:
        assert "/.gw-capture" not in (gateway.conf_dir / "capture-off.conf").read_text()
        result = load(gateway, "rest", concurrency=1, requests=5)
        assert (result.ok, result.failed) == (5, 0)
        assert service.settled_stats()["received"] == 0


# -- what the service receives: the body and the gateway's own headers, never a credential ---------------
class RecordingStub:
    """An HTTP server that answers 204 and keeps every byte it received."""

    def __init__(self, port: int) -> None:
        self.port, self.received = port, bytearray()
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.AbstractServer | None = None
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            self.received += head
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            self.received += await reader.readexactly(length)
            writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            await writer.drain()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", self.port))
        self._ready.set()
        self._loop.run_forever()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10)

    def stop(self) -> None:
        def close() -> None:   # closed, so nginx drops its idle connections here before the next test's service
            self._server.close()
            for writer in self._writers:
                writer.close()
            self._loop.call_later(0.2, self._loop.stop)
        self._loop.call_soon_threadsafe(close)
        self._thread.join(10)


def test_the_capture_service_never_sees_api_keys_bearer_tokens_or_client_certificates(cgateway, sink_port):
    rest_body = predict_bodies()[0][0]
    key, admin_key = cgateway.key("client"), cgateway.key("admin")
    before = len(cgateway.access_entries())
    stub = RecordingStub(sink_port)
    stub.start()
    try:
        with cgateway.http() as client:
            for headers in ({"x-api-key": key}, {"authorization": f"Bearer {admin_key}"}):
                answer = client.post(f"{cgateway.rest_url}/v1/models/{MODEL}:predict", content=rest_body,
                                     headers={**headers, "content-type": "application/json", "cookie": "session=secret-cookie"})
                assert answer.status_code == 200, answer.text
        with cgateway.http(cert="client") as client:
            answer = client.post(f"{cgateway.mtls_url}/v1/models/{MODEL}:predict", content=rest_body)
            assert answer.status_code == 200, answer.text
        result = load(cgateway, "grpc", concurrency=1, requests=2)
        assert (result.ok, result.failed) == (2, 0)
        entries = predictions_logged(cgateway, before, 5)
        deadline = threading.Event()
        for _ in range(100):
            if stub.received.count(b"x-request-id:") >= 5:
                break
            deadline.wait(0.05)
    finally:
        stub.stop()
    seen = bytes(stub.received)
    assert seen.count(b"x-request-id:") == 5, seen[:2000]
    for entry in entries:   # each copy carries the gateway's request id of the logged request
        assert f"x-request-id: {entry['request_id']}".encode() in seen
    cert_pem = cgateway.secrets.cert("client").read_bytes()
    for secret in (key.encode(), admin_key.encode(), b"Bearer", b"x-api-key", b"authorization", b"secret-cookie",
                   b"cookie", b"ssl-client", cert_pem.splitlines()[1], b"CN=client"):
        assert secret.lower() not in seen.lower(), secret
    header_names = {line.split(b":", 1)[0].lower() for block in seen.split(b"\r\n\r\n")
                    for line in block.split(b"\r\n")[1:] if b":" in line and not line.startswith(b"{")}
    allowed = {b"host", b"content-length", b"content-type", b"grpc-encoding", b"x-capture-uri", b"x-request-id",
               b"x-capture-label", b"x-capture-time"}
    assert header_names <= allowed | {h for h in header_names if not h.isascii() or b" " in h}, header_names


# -- the real capture service --------------------------------------------------------------------------------
def test_rest_and_grpc_predict_are_recorded_as_prediction_logs_tf_serving_parses(cgateway, sink_port, tmp_path):
    from tensorflow_serving.apis import prediction_log_pb2

    before = len(cgateway.access_entries())
    with sink(cgateway, sink_port, tmp_path, "1") as service:
        for protocol in ("rest", "grpc"):
            result = load(cgateway, protocol, concurrency=2, requests=6)
            assert (result.ok, result.failed) == (6, 0), result.errors
        entries = predictions_logged(cgateway, before, 12)
        stats = service.settled_stats()
    assert (stats["offered"], stats["written"], stats["unreadable"]) == (12, 12, 0), stats
    files = sorted((tmp_path / "capture").glob("*.tfrecord"))
    assert files and not list((tmp_path / "capture").glob("*.part"))   # closed and renamed at SIGTERM
    official = []
    for path in files:
        with open(path, "rb") as stream:
            for _, data in iter_records(stream, path):
                message = prediction_log_pb2.PredictionLog()
                message.ParseFromString(data)
                official.append(message)
    assert len(official) == 12
    assert {m.WhichOneof("log_type") for m in official} == {"predict_log"}
    assert all(m.log_metadata.model_spec.name == MODEL and m.log_metadata.request_origin == "gateway"
               for m in official)
    records = list(read_capture(tmp_path / "capture"))
    assert sorted(r.request_id for r in records) == sorted(e["request_id"] for e in entries)
    expected = predict_bodies()[1][0].inputs["images"]
    for record in records:
        assert record.signature == "serving_default" and record.method == "predict"
        assert (record.version, record.label) == (None, None)
        got = record.inputs()["images"]
        assert got.shape == tuple(d.size for d in expected.tensor_shape.dim) and str(got.dtype) == "float32"
        assert abs(record.time - record.log.log_metadata.timestamp_secs) < 1


def test_ten_percent_keeps_exactly_floor_of_a_tenth_of_what_the_access_log_counted(cgateway, sink_port, tmp_path):
    before = len(cgateway.access_entries())
    with sink(cgateway, sink_port, tmp_path, "0.1") as service:
        rest = load(cgateway, "rest", concurrency=4, requests=157)
        grpc_result = load(cgateway, "grpc", concurrency=4, requests=76)
        assert (rest.failed, grpc_result.failed) == (0, 0), rest.errors + grpc_result.errors
        logged = len(predictions_logged(cgateway, before, 233))
        stats = service.settled_stats()
    assert logged == 233
    assert stats["offered"] == logged
    assert stats["written"] == math.floor(logged * 0.1) == 23
    assert len(list(read_capture(tmp_path / "capture"))) == 23


def test_models_not_listed_are_not_counted(cgateway, sink_port, tmp_path):
    with sink(cgateway, sink_port, tmp_path, "1", "--models=some-other-model") as service:
        assert load(cgateway, "rest", concurrency=1, requests=4).ok == 4
        stats = service.settled_stats()
    assert (stats["received"], stats["ignored"], stats["offered"], stats["written"]) == (4, 4, 0, 0)


# -- a slow or dead capture service: clients see no failure ---------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("state", ["stopped", "stalled"])
def test_a_stopped_or_stalled_capture_service_fails_no_client_request(
        nginx, nginx_version, gateway_secrets, compose_gateway_env, tf_serving, tmp_path, state):
    # A gateway of its own: one that an earlier test left with the service marked down would drop the copies
    # without trying the service for up to GATEWAY_CAPTURE_FAIL_TIMEOUT, and its one late try could end
    # with the test, not with a timeout.
    port = free_port()
    with contextlib.ExitStack() as stack:
        gateway = stack.enter_context(capture_gateway(nginx, nginx_version, gateway_secrets, compose_gateway_env,
                                                      tf_serving, tmp_path / "gw", port))
        if state == "stalled":
            service = stack.enter_context(sink(gateway, port, tmp_path, "1"))
            service.pause()   # SIGSTOP: the kernel still accepts connections, nothing answers (docker pause)
        results = [load(gateway, protocol, concurrency=8, seconds=3.0) for protocol in ("rest", "grpc")]
        error_log = gateway.error_log.read_text()
    for result in results:
        assert result.ok > 50 and result.failed == 0, result.errors
    # nginx marks the service down after three failed copies, so only the requests whose copies were
    # under way wait out GATEWAY_CAPTURE_TIMEOUT (compose: 1 s) before the next one on their connection.
    slow = sum(1 for r in results for latency in r.latencies if latency > 0.15)
    assert slow <= 2 * 2 * 8, slow
    assert ("upstream timed out" in error_log) if state == "stalled" else ("Connection refused" in error_log)


# -- the service's parts, without nginx --------------------------------------------------------------------------
class NoMetadata:
    def input_dtypes(self, *args):
        raise AssertionError("Classify/Regress/gRPC need no metadata")


def grpc_body(message, compress: bool = False) -> bytes:
    data = message.SerializeToString()
    if compress:
        data = gzip.compress(data)
    return struct.pack(">BI", int(compress), len(data)) + data


def test_rest_paths_name_model_version_label_and_the_canary_label_routes_an_unnamed_one():
    h = {"content-type": "application/json", "x-request-id": "abc", "x-capture-time": "1700000000.250"}
    assert parse_mirrored("/v1/models/m/versions/3:predict", h, b"{}").version == 3
    assert parse_mirrored("/v1/models/m/labels/stable:regress?x=1", h, b"{}").label == "stable"
    routed = parse_mirrored("/v1/models/m:classify", {**h, "x-capture-label": "canary"}, b"{}")
    assert (routed.model, routed.method, routed.label, routed.request_id, routed.time) == \
        ("m", "classify", "canary", "abc", 1700000000.25)
    named = parse_mirrored("/v1/models/m/versions/2:predict", {**h, "x-capture-label": "canary"}, b"{}")
    assert (named.version, named.label) == (2, None)
    for other in ("/v1/models/m", "/v1/models/m/metadata", "/healthz", "/monitoring/prometheus/metrics"):
        assert parse_mirrored(other, h, b"") is None


def test_grpc_bodies_gzip_included_and_non_inference_methods():
    request = apis.RegressionRequest()
    request.model_spec.name = "ranker"
    request.model_spec.version_label = "canary"
    request.input.example_list.examples.add()
    h = {"content-type": "application/grpc", "grpc-encoding": "gzip"}
    got = parse_mirrored("/tensorflow.serving.PredictionService/Regress", h, grpc_body(request, compress=True))
    assert (got.method, got.model, got.label) == ("regress", "ranker", "canary")
    log = to_prediction_log(got, Fraction(1, 10), NoMetadata())
    assert log.regress_log.request == request
    assert log.log_metadata.model_spec.signature_name == "serving_default"
    assert abs(log.log_metadata.sampling_config.sampling_rate - 0.1) < 1e-12
    assert parse_mirrored("/tensorflow.serving.PredictionService/GetModelMetadata",
                          {"content-type": "application/grpc"}, grpc_body(request)) is None
    with pytest.raises(ValueError, match="announces"):
        parse_mirrored("/tensorflow.serving.PredictionService/Predict", {"content-type": "application/grpc"},
                       grpc_body(request)[:-1])


def test_rest_classify_becomes_the_classification_request_tf_serving_builds():
    body = b'{"signature_name": "classify_x", "examples": [{"age": 3, "name": "a"}], "context": {"q": 1.5}}'
    got = parse_mirrored("/v1/models/ranker/versions/4:classify", {"content-type": "application/json"}, body)
    log = to_prediction_log(got, Fraction(1), NoMetadata())
    request = log.classify_log.request
    assert request.model_spec.name == "ranker" and request.model_spec.version.value == 4
    assert request.model_spec.signature_name == "classify_x"
    assert len(request.input.example_list_with_context.examples) == 1
    assert log.log_metadata.model_spec.signature_name == "classify_x"


def test_settings_are_read_with_a_clear_error():
    assert parse_rate("10%") == parse_rate("0.1") == parse_rate("1/10") == Fraction(1, 10)
    for bad in ("0", "1.5", "ten", "-0.1"):
        with pytest.raises(ValueError, match="CAPTURE_RATE"):
            parse_rate(bad)
    assert parse_models(" a, b c ") == {"a", "b", "c"}
    assert parse_models("") == parse_models("*") == frozenset()


def test_a_full_writer_queue_drops_and_counts_never_blocks():
    gate = threading.Event()

    class SlowWriter:
        def write(self, log):
            gate.wait(10)
            return True

        def rotate_if_due(self):
            pass

        def close(self):
            pass

    capture = CaptureSink(SlowWriter(), NoMetadata(), rate=Fraction(1), queue_bytes=100)
    request = apis.PredictRequest()
    request.model_spec.name = "m"
    body = grpc_body(request)
    for _ in range(40):
        capture.offer("/tensorflow.serving.PredictionService/Predict", {"content-type": "application/grpc"}, body)
    assert capture.stats.kept == 40 and capture.stats.dropped_queue > 0
    gate.set()
    assert capture.drain(10)
    assert capture.stats.written + capture.stats.dropped_queue == 40
    capture.close()



# -- the compose service --------------------------------------------------------------------------------------
def test_the_compose_capture_service_is_internal_hardened_and_takes_its_settings_from_env():
    from serving.config.compose import load_compose_model
    from tests.support.compose import CPU, PASSWORD, compose_env, dotenv

    model = load_compose_model(CPU, env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD))
    service, gateway = model["services"]["capture"], model["services"]["gateway"]
    assert "ports" not in service            # reached only by the gateway, inside the compose network
    assert [v["source"] for v in service["volumes"] if v["type"] == "volume"] == ["capture-data"]
    assert service["healthcheck"]["test"][0] == "CMD" and service.get("user")
    assert "capture" not in (gateway.get("depends_on") or {})   # a dead capture service never holds the gateway
    env = dotenv()
    assert env["CAPTURE"] == "off" and gateway["environment"]["GATEWAY_CAPTURE"] == "off"
    for name in ("CAPTURE_RATE", "CAPTURE_MODELS", "CAPTURE_MAX_FILE_BYTES", "CAPTURE_MAX_FILE_SECONDS",
                 "CAPTURE_MAX_DAY_BYTES", "CAPTURE_MAX_TOTAL_BYTES"):
        assert str(service["environment"][name]) == env[name], name
    on = load_compose_model(CPU, env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD, CAPTURE="on", CAPTURE_RATE="5%"))
    assert on["services"]["gateway"]["environment"]["GATEWAY_CAPTURE"] == "on"
    assert parse_rate(on["services"]["capture"]["environment"]["CAPTURE_RATE"]) == Fraction(1, 20)
