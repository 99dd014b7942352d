"""``python -m loadtest run|sweep --input-data CAPTURE`` against the embedded server serving the tiny model.

Captures are written with TensorFlow's TFRecord writer and TF Serving's
official protos; the CLI runs as a subprocess on free ports. Assertions are
on what was sent and on the schedule computed (the summary's ``schedule_s``),
never on wall time.
"""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from loadtest.payloads import Target, build_payload
from serving.checkout import REPO_ROOT
from serving.codec import decode_predict_request
from serving.wire import serving_apis_pb2 as apis
from tests.replay.captures import T0, Captured, write_capture
from tests.support.models import export_tiny
from tests.support.servers import EmbeddedServer

pytestmark = pytest.mark.slow
GAPS = (0.0, 0.05, 0.3, 0.31, 0.9, 1.2)   # a burst, a lull, a burst


def requests(start: float, first: int = 0) -> list[Captured]:
    return [Captured({"x": np.full((1 + i % 3, 3), first + i, np.float32)}, start + gap, model="tiny")
            for i, gap in enumerate(GAPS)]


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    root = tmp_path_factory.mktemp("captures")
    directory = root / "dir"
    directory.mkdir()
    write_capture(directory, requests(T0))
    write_capture(directory, requests(T0 + 600, first=100))   # ten minutes later
    return {"file": write_capture(root / "one.tfrecord", requests(T0)), "dir": directory}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    export_tiny(repo / "tiny" / "1")
    with EmbeddedServer(["--model_name=tiny", f"--model_base_path={repo / 'tiny'}"], wait_for=["tiny"]) as running:
        yield running


def loadtest(*args, out):
    result = subprocess.run([sys.executable, "-m", "loadtest", *args, "--model", "tiny", "--model-repo",
                             str(out / "no-repo"), "--work-dir", str(out / "no-stack"), "--out", str(out)],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    return result


def test_capture_payload_is_every_captured_request_as_sent_readdressed_to_the_target(captures):
    payload = build_payload(Target(model="tiny", version=3, input_data=captures["dir"], since=T0 + 600))
    assert len(payload.mix) == len(GAPS) and "6 Predict requests of 'tiny'" in payload.source
    assert [r.time - payload.mix[0].time for r in payload.mix] == pytest.approx(GAPS)
    for i, recorded in enumerate(payload.mix):
        request = apis.PredictRequest.FromString(recorded.grpc_request)
        assert (request.model_spec.name, request.model_spec.version.value) == ("tiny", 3)
        np.testing.assert_array_equal(decode_predict_request(recorded.grpc_request)["x"],
                                      np.full((1 + i % 3, 3), 100 + i, np.float32))
        assert json.loads(recorded.rest_body)["instances"][0] == {"x": [100.0 + i] * 3}


def test_run_replay_keeps_recorded_inter_arrival_times_scaled_and_reports_the_lag(server, captures, tmp_path):
    result = loadtest("run", "replay", "--grpc", server.grpc_target, "--input-data", str(captures["file"]),
                      "--replay-rate", "recorded", "--replay-speed", "4", out=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "replay_grpc_summary.json").read_text())
    assert summary["requests"] == len(GAPS) and summary["failures"] == 0
    assert summary["schedule_s"] == pytest.approx([g / 4 for g in GAPS])
    assert set(summary["lag"]) >= {"lag_p50_ms", "lag_p99_ms", "lag_max_ms", "late"}
    assert "replay lag behind the recorded schedule" in result.stdout


def test_run_replay_of_a_directory_window_over_rest_at_a_fixed_rate(server, captures, tmp_path):
    result = loadtest("run", "replay", "--rest", server.rest_url, "--input-data", str(captures["dir"]),
                      "--since", "2025-12-06T08:05:00Z", "--replay-rate", "50", out=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "replay_rest_summary.json").read_text())
    assert summary["requests"] == len(GAPS) and summary["failures"] == 0   # the later file only
    assert summary["schedule_s"] == pytest.approx([i / 50 for i in range(len(GAPS))])


def test_locust_scenario_sends_the_recorded_mix(server, captures, tmp_path):
    result = loadtest("run", "steady", "--grpc", server.grpc_target, "--input-data", str(captures["dir"]),
                      "--run-time", "2s", "-u", "1", out=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "12 Predict requests of 'tiny'" in result.stdout
    summary = json.loads((tmp_path / "steady_grpc_summary.json").read_text())
    assert summary["requests"] > 0 and summary["failures"] == 0 and summary["payload"]["recorded_requests"] == 12


def test_sweep_replays_the_recording_at_each_speed(server, captures, tmp_path):
    result = loadtest("sweep", "--grpc", server.grpc_target, "--input-data", str(captures["file"]),
                      "--replay-rate", "recorded", "--replay-speed", "5,10", "--window", "0.5",
                      "--stable-windows", "2", "--warmup", "0.2", "--max-level-time", "3", out=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    series = json.loads((tmp_path / "sweep.json").read_text())["series"][0]
    assert [level["level"] for level in series["levels"]] == [5.0, 10.0]
    assert all(level["mode"] == "replay" and level["errors"] == 0 and level["lag_p99_ms"] is not None
               for level in series["levels"])


@pytest.mark.parametrize("args, rule", [
    (("--since", str(T0 + 3600)), "no captured Predict request between"),
    (("--batch-size", "4"), "--batch-size does not apply to a capture"),
    (("--signature", "strings"), "no captured request calls signature 'strings'"),
])
def test_empty_window_and_contradicting_flags_exit_2_naming_the_rule(server, captures, tmp_path, args, rule):
    result = loadtest("run", "replay", "--grpc", server.grpc_target, "--input-data", str(captures["file"]), *args,
                      out=tmp_path)
    assert result.returncode == 2 and rule in result.stderr, result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_replay_needs_a_capture_and_an_empty_directory_is_refused(server, tmp_path):
    np.savez(tmp_path / "x.npz", x=np.ones((2, 3), np.float32))
    result = loadtest("run", "replay", "--grpc", server.grpc_target, "--input-data", str(tmp_path / "x.npz"),
                      out=tmp_path)
    assert result.returncode == 2 and "give --input-data a capture file or directory" in result.stderr
    (tmp_path / "empty").mkdir()
    result = loadtest("run", "replay", "--grpc", server.grpc_target, "--input-data", str(tmp_path / "empty"),
                      out=tmp_path)
    assert result.returncode == 2 and "holds no capture files" in result.stderr, result.stderr
