"""A shadow canary on the embedded server behind the real nginx gateway: clients get stable's answers, the
canary gets a copy of their traffic, and ``analyze --live`` judges it as ``analyze --inputs`` does.

Version 1 of digits is ``stable``; version 2 is a copy of it (a canary that agrees) and version 3 the
shuffled-classes model of tests/rollout/v2_models.py (fast, error-free, wrong). Clients send unlabeled REST
Predicts through the gateway; the test records each one into a capture directory with
``serving.capture.CaptureWriter`` (what the gateway's capture service and the server's request capture
write with: PredictionLog records, ``.part`` files renamed when closed, rotated by size), because this test
runs no capture service. ``analyze --live`` runs as its own process (``python -m serving.rollout``),
tailing that directory while the clients send; the offline ``analyze --inputs FILE`` then reads the same
records. The CLI's route changes go to the gateway's files (``--gateway nginx``); the server's own metrics
(``:tensorflow:serving:request_count``) count the copies.
"""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import httpx
import pytest

from exporter.manifest import load_manifest
from gateway.canary import route_file_names
from serving.capture import CaptureWriter
from serving.checkout import REPO_ROOT
from serving.config.files import MONITORING_PATH
from serving.rollout.cli import main
from serving.rollout.publish import publish_saved_model
from serving.wire import serving_apis_pb2 as apis
from tests.rollout.test_shadow_live import prediction_log
from tests.rollout.v2_models import build_wrapped
from tests.support.canary_stack import MODEL, RolloutOnGateway, canary_gateway, canary_server, send_resending_once

pytestmark = pytest.mark.slow
VERSIONS = {"same": 2, "shuffled": 3}
VERDICTS = {"same": "PASS", "shuffled": "FAIL"}
REQUESTS = 40  # over --min-requests 20 with room
# The same thresholds for the live and the offline run; latency is not what these tests judge (a shared
# 2-core machine, and the live run compares 4 at once), answers are.
THRESHOLDS = ("--rounds", "3", "--max-p50-ratio", "20", "--max-p99-ratio", "50")


class Stack(RolloutOnGateway):
    ANALYSIS_KEY = "loadtest"

    def __init__(self, root, repo, work, server, gateway, nginx):
        super().__init__(repo, work, server, gateway, nginx)
        self.root = root
        inputs = load_manifest(repo / MODEL / "1").golden_inputs()
        self.rows = [{k: v[i:i + 1] for k, v in inputs.items()} for i in range(len(next(iter(inputs.values()))))]

    def request_count(self) -> float:
        """The server's inference requests of digits so far (every label and version: TF Serving's metric)."""
        page = httpx.get(self.server.rest_url + MONITORING_PATH, timeout=30).text
        return sum(float(m.group(1)) for m in re.finditer(
            rf':tensorflow:serving:request_count{{model_name="{MODEL}",status="\w+"}} (\S+)', page))

    def stable_answers(self) -> list[dict]:
        """Stable's own answer to each row, asked of the server directly (once: not to count in the metrics)."""
        if not hasattr(self, "_stable"):
            self._stable = [httpx.post(f"{self.server.rest_url}/v1/models/{MODEL}/labels/stable:predict",
                                       json={"inputs": {k: v.tolist() for k, v in row.items()}},
                                       timeout=30).json()["outputs"] for row in self.rows]
        return self._stable


@pytest.fixture(scope="module")
def stack(model_repo, nginx, nginx_version, gateway_secrets, compose_gateway_env, tmp_path_factory):
    root = tmp_path_factory.mktemp("shadow")
    repo, work = root / "models", root / "server"
    shutil.copytree(model_repo / MODEL / "1", repo / MODEL / "1")
    work.mkdir()
    publish_saved_model(model_repo / MODEL / "1", repo, MODEL, VERSIONS["same"])
    publish_saved_model(build_wrapped(model_repo / MODEL / "1", root / "shuffled", "shuffled"), repo, MODEL,
                        VERSIONS["shuffled"])
    with canary_server(repo, work, {"stable": 1, "canary": 1}) as server, \
            canary_gateway(nginx, nginx_version, compose_gateway_env, root / "gateway", gateway_secrets,
                           server) as gateway:
        yield Stack(root, repo, work, server, gateway, nginx)


def capture_writer(directory) -> CaptureWriter:
    """A capture directory as the gateway's capture service writes it; small files, so it rotates often."""
    return CaptureWriter(directory, origin="gateway", max_file_bytes=16 * 1024, max_file_seconds=3600,
                         max_total_bytes=1 << 30)


def joined(directory, out):
    """The closed capture files, in name order, as one TFRecord file (what ``analyze --inputs FILE`` reads)."""
    out.write_bytes(b"".join(p.read_bytes() for p in sorted(directory.glob("*.tfrecord"))))
    return out


def send_unlabeled(stack: Stack, count: int, capture: CaptureWriter | None = None,
                   stop: threading.Event | None = None) -> list:
    """``count`` unlabeled Predicts through the gateway (or until ``stop``), each recorded into ``capture``;
    the mismatches with stable's own answer to the same row (the client must only ever get stable's)."""
    mismatches, sent, stable, resent = [], 0, stack.stable_answers(), []
    with stack.gateway.http() as http:
        while sent < count and not (stop is not None and stop.is_set()):
            row = stack.rows[sent % len(stack.rows)]
            body = {"inputs": {k: v.tolist() for k, v in row.items()}}
            # A reload (the rollout's route changes) closes idle keep-alive connections: sent again once, as
            # the SDK does for an idempotent call.
            response = send_resending_once(lambda body=body: http.post(
                f"{stack.gateway.rest_url}/v1/models/{MODEL}:predict", json=body,
                headers={"x-api-key": stack.gateway.key()}), resent)
            if capture is not None:
                # As the gateway's capture records a call its canary routes sent to stable: under that label.
                log = apis.PredictionLog.FromString(prediction_log(MODEL, row, request_id=str(sent), label="stable",
                                                                   micros=int(time.time() * 1e6)))
                assert capture.write(log)
            answer = response.json().get("outputs") if response.status_code == 200 else response.text
            if answer != stable[sent % len(stack.rows)]:
                mismatches.append((sent, response.status_code, answer))
            sent += 1
    return mismatches


def wait_until(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        threading.Event().wait(0.05)
    return True


@pytest.mark.parametrize("kind", ["same", "shuffled"])
def test_a_shadow_canary_gets_the_traffic_clients_get_stable_and_live_judges_as_offline(stack, kind, capsys):
    version = VERSIONS[kind]
    code, out = stack.rollout("canary", MODEL, str(version), "--shadow")
    assert code == 0, out
    assert "100% mirrored to canary (shadow)" in out
    assert (stack.gateway.conf_dir / route_file_names(MODEL)[2]).exists()
    try:
        # The version each unlabeled answer came from: REST metadata through the gateway (routed to stable).
        with stack.gateway.http() as http:
            versions = {http.get(f"{stack.gateway.rest_url}/v1/models/{MODEL}/metadata",
                                 headers={"x-api-key": stack.gateway.key()}).json()["model_spec"]["version"]
                        for _ in range(5)}
        assert versions == {"1"}
        # Clients: stable's answers only; the server counts each of their requests twice (theirs and the copy).
        stack.stable_answers()
        before = stack.request_count()
        assert send_unlabeled(stack, REQUESTS) == []
        assert wait_until(lambda: stack.request_count() - before >= 2 * REQUESTS), stack.request_count() - before
        assert stack.request_count() - before == 2 * REQUESTS

        # Live: the analysis tails the capture while the clients send (its own process).
        directory = stack.root / f"capture-{kind}"
        capture = capture_writer(directory)
        live_report = stack.work / f"live-{kind}.json"
        live = subprocess.Popen(
            [sys.executable, "-m", "serving.rollout", "analyze", MODEL, "--live", str(directory),
             "--requests", str(REQUESTS), "--report", str(live_report), *THRESHOLDS, *stack.where("analyze")],
            cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        started = ""
        while "live analysis of" not in started:  # printed once its tail has taken the directory's start
            line = live.stderr.readline()
            assert line, started + live.stderr.read()
            started += line
        mismatches = send_unlabeled(stack, REQUESTS, capture)
        capture.close()
        live_out, live_err = live.communicate(timeout=300)
        assert mismatches == []  # a shuffled canary's answers never reached a client
        offline_code, offline_out = stack.rollout("analyze", MODEL, "--inputs",
                                                  str(joined(directory, stack.work / f"capture-{kind}.tfrecord")),
                                                  "--report", str(stack.work / f"offline-{kind}.json"), *THRESHOLDS)
        with capsys.disabled():
            print(f"\n--- {kind}: analyze --live (exit {live.returncode})\n{started}{live_err}{live_out}"
                  f"\n--- {kind}: analyze --inputs (exit {offline_code})\n{offline_out}")
        live_json = json.loads(live_report.read_text())
        offline_json = json.loads((stack.work / f"offline-{kind}.json").read_text())
        assert f"live: {REQUESTS} captured records read, {REQUESTS} compared" in live_err
        assert live_json["verdict"] == offline_json["verdict"] == VERDICTS[kind]
        assert live.returncode == offline_code == {"PASS": 0, "FAIL": 1}[VERDICTS[kind]]
        agreement = {r["name"]: r["verdict"] for r in live_json["checks"]}
        assert agreement == {r["name"]: r["verdict"] for r in offline_json["checks"]}  # check by check
    finally:
        code, out = stack.rollout("rollback", "--model", MODEL)
    assert code == 0, out
    assert not any((stack.gateway.conf_dir / name).exists() for name in route_file_names(MODEL))  # shadow ended


def test_auto_shadow_phase_fails_a_shuffled_canary_before_any_traffic_moves(stack, capsys):
    directory = stack.root / "capture-auto"
    capture = capture_writer(directory)
    stop = threading.Event()
    mismatches: list = []

    failed: list = []

    def clients() -> None:
        try:
            mismatches.extend(send_unlabeled(stack, 10**9, capture, stop=stop))
        except Exception as exc:  # noqa: BLE001 (reported by the test, not lost in the thread)
            failed.append(repr(exc))

    thread = threading.Thread(target=clients)
    thread.start()
    try:
        report = stack.work / "auto-shadow.json"
        code, out = stack.rollout("auto", MODEL, str(VERSIONS["shuffled"]), "--steps", "10,100", "--interval", "0",
                                  "--shadow-phase", "60s", "--live", str(directory),
                                  "--requests", str(REQUESTS), "--report", str(report), *THRESHOLDS)
    finally:
        stop.set()
        thread.join(60)
        capture.close()
    with capsys.disabled():
        print(f"\n--- auto --shadow-phase (exit {code})\n{out}")
    doc = json.loads(report.read_text())
    assert code == 1 and doc["outcome"] == "rolled back", out
    assert [(d["step"], d["verdict"]) for d in doc["decisions"]] == [("shadow", "FAIL")]
    # the shuffled version wraps version 1's weights, so the outputs are judged element-wise (tolerance:)
    checks = {c["name"]: c for c in doc["decisions"][0]["analysis"]["checks"]}
    assert checks["tolerance:probabilities"]["verdict"] == "FAIL", checks
    assert mismatches == [] and failed == []
    assert not any((stack.gateway.conf_dir / name).exists() for name in route_file_names(MODEL))


STALLED = 4


def build_stalling(v1, out, fifo):
    """Version 1 whose every call first reads ``fifo``: a named pipe with no writer, so the call waits (no CPU)
    until the test opens it for writing. TensorFlow is imported by the builder."""
    import tensorflow as tf

    from tests.rollout.v2_models import _save_served

    def outputs(loaded, images):
        # The read feeds the answer (its length, 0 once released): a control dependency alone is optimized away.
        waited = tf.cast(tf.strings.length(tf.io.read_file(str(fifo))), tf.float32)
        probabilities = loaded.signatures["serving_default"](images=images)["probabilities"] + waited
        return {"probabilities": probabilities, "classes": tf.argmax(probabilities, axis=-1)}

    return _save_served(out, tf.saved_model.load(str(v1)), outputs)


def release(fifo) -> None:
    """Let every call waiting on ``fifo`` go on (each reads end-of-file once a writer came and went)."""
    for _ in range(200):
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            return  # no reader left
        os.close(fd)
        threading.Event().wait(0.05)


def test_a_stalled_shadow_canary_fails_and_holds_no_client(stack, model_repo, capsys):
    fifo = stack.root / "stall.fifo"
    os.mkfifo(fifo)
    publish_saved_model(build_stalling(model_repo / MODEL / "1", stack.root / "stalling", fifo), stack.repo, MODEL,
                        STALLED)
    code, out = stack.rollout("canary", MODEL, str(STALLED), "--shadow")
    assert code == 0, out
    try:
        # One keep-alive connection: nginx reads its next request once the last one's copy ended, so the copy's
        # timeouts (routes.conf: 2 s) bound the wait; the first timed-out copy stops the copies (max_fails).
        start = time.monotonic()
        slowest, mismatches = 0.0, []
        for _ in range(5):
            begin = time.monotonic()
            mismatches += send_unlabeled(stack, 4)
            slowest = max(slowest, time.monotonic() - begin)
        sequential = time.monotonic() - start
        # Concurrent clients on connections of their own, while the canary's calls are stuck in the server.
        results: list = []
        threads = [threading.Thread(target=lambda: results.append(send_unlabeled(stack, 5))) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        with capsys.disabled():
            print(f"\nstalled canary: 20 sequential requests on one connection in {sequential:.2f} s (slowest 4 in "
                  f"{slowest:.2f} s); 6 x 5 concurrent requests: {sum(map(len, results))} mismatches")
        assert mismatches == [] and results == [[]] * 6  # every client answered, by stable
        # The canary did stall: its copy timed out at the gateway, which then stopped the copies (max_fails).
        log = stack.gateway.error_log.read_text()
        assert re.search(r"upstream timed out .*subrequest: \"/v1/models/digits/labels/canary:predict\"", log), log
        assert "upstream server temporarily disabled" in log
        assert slowest < 4 * 0.5 + 2.0 + 3.0, slowest  # a bound (the copy's 2 s timeout once), not a speed target
    finally:
        release(fifo)
        code, out = stack.rollout("rollback", "--model", MODEL)
    assert code == 0, out


def test_an_operators_shadow_is_refused_when_another_changed_the_routes_since_it_read_them(stack, monkeypatch):
    """Version 2 is the canary already (weight 0). Operator A (`canary --shadow`) reads the routes, then operator
    B's `canary --weight 10` runs to its end, then A goes on: A's first route write finds the routes changed
    since it read them and is refused (exit 4); B's routes stay (ordered by events: A waits in its read until B
    is done). Neither changes the models config (the canary is loaded), so only the routes' compare-and-swap
    stands between A and B's weight: without it A writes its shadow over B's 10 % and exits 0."""
    from serving.rollout import traffic

    assert stack.rollout("canary", MODEL, str(VERSIONS["same"]))[0] == 0

    a_read, b_done = threading.Event(), threading.Event()
    real_state = traffic.HostNginx.state

    def state(self, model):
        value = real_state(self, model)
        if threading.current_thread().name == "operator-a" and not a_read.is_set():
            a_read.set()
            assert b_done.wait(300)
        return value

    monkeypatch.setattr(traffic.HostNginx, "state", state)
    codes: dict[str, int] = {}

    def operator_a() -> None:
        codes["a"] = main(["canary", MODEL, str(VERSIONS["same"]), "--shadow", *stack.where("canary")])

    thread = threading.Thread(target=operator_a, name="operator-a")
    thread.start()
    try:
        assert a_read.wait(120)
        codes["b"], out = stack.rollout("canary", MODEL, str(VERSIONS["same"]), "--weight", "10")
    finally:
        b_done.set()
        thread.join(300)
    try:
        assert codes == {"a": 4, "b": 0}, codes
        conf, label_map, shadow_map = (stack.gateway.conf_dir / name for name in route_file_names(MODEL))
        assert not shadow_map.exists() and "10% canary" in conf.read_text()  # B's routes, whole
    finally:
        assert stack.rollout("rollback", "--model", MODEL)[0] == 0
