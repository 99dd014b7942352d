"""The sweep against the running embedded server, and one bounded tuner run that restarts it."""
from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from serving.checkout import REPO_ROOT
from serving.config import load_batching_parameters

pytestmark = pytest.mark.slow


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loadtest", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_sweep_over_grpc_and_rest_reports_levels_and_server_split(digits_server, model_repo, tmp_path):
    out = run_cli("sweep", "--model-repo", str(model_repo), "--grpc", digits_server.grpc_target,
                  "--rest", digits_server.rest_url,
                  "--metrics-url", f"{digits_server.rest_url}/monitoring/prometheus/metrics",
                  "--protocol", "grpc,rest", "--concurrency", "1,4", "--window", "0.7", "--stable-windows", "2",
                  "--max-level-time", "4", "--warmup", "0.5", "--out", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert [s["protocol"] for s in data["series"]] == ["grpc", "rest"]
    for series in data["series"]:
        assert [lvl["level"] for lvl in series["levels"]] == [1, 4]
        for lvl in series["levels"]:
            assert lvl["throughput_rps"] > 0 and lvl["errors"] == 0
            assert 0 < lvl["p50_ms"] <= lvl["p90_ms"] <= lvl["p95_ms"] <= lvl["p99_ms"]
            server = lvl["server"]
            # batching is on: the server recorded request and batch-queueing latency for this level's requests
            assert server["server_request_ms"] > 0
            assert server["server_queue_ms"] is not None and server["server_batch_size_mean"] >= 1
            # the server saw (about) the requests the client counted in the same windows
            assert abs(server["server_requests"] - lvl["requests"]) <= 0.15 * lvl["requests"] + 10
            # a mean server time cannot exceed what the client waited on average
            assert server["server_request_ms"] <= lvl["avg_ms"] * 1.05 + 0.5
    rows = list(csv.DictReader((tmp_path / "sweep.csv").open()))
    assert len(rows) == 4 and float(rows[0]["throughput_rps"]) > 0
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "digits/grpc/batching-running" in out.stdout


def test_rate_sweep_holds_the_requested_rate(digits_server, model_repo, tmp_path):
    out = run_cli("sweep", "--model-repo", str(model_repo), "--grpc", digits_server.grpc_target,
                  "--request-rate", "20,40", "--window", "1", "--stable-windows", "2", "--max-level-time", "5",
                  "--warmup", "0.5", "--out", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    levels = json.loads((tmp_path / "sweep.json").read_text())["series"][0]["levels"]
    for lvl in levels:
        assert lvl["throughput_rps"] == pytest.approx(lvl["level"], rel=0.2)


def test_tuner_restarts_the_server_per_candidate_and_reports_every_setting(user_model_tune):
    out, tmp_path = user_model_tune
    summary = json.loads((tmp_path / "tune.json").read_text())
    threads, batching = summary["trials"][0], summary["trials"][1]
    # each candidate was swept in turn with the default server, which stayed up (TF Serving's defaults)
    assert threads["dimension"] == "intra_op" and threads["config"]["intra_op"] == 1
    assert threads["score_rps"] > 0 and threads["baseline_rps"] > 0 and threads["p50_c1_ms"] > 0
    assert threads["throughput_ratio"] == pytest.approx(threads["score_rps"] / threads["baseline_rps"])
    assert not (tmp_path / "trials" / "default" / "batching.config").exists()
    # the candidate's flag reached its server's TensorFlow session
    assert "intra_op_parallelism_threads=1" in (tmp_path / "trials" / "00" / "server.log").read_text()
    # the batching candidate's server got the BatchingParameters file (from serving/batching.cpu.config)
    assert batching["dimension"] == "batching" and batching["config"]["batching"] == "on"
    assert load_batching_parameters(tmp_path / "trials" / "01" / "batching.config").max_batch_size.value >= 64
    assert summary["final"]["label"] == "final" and summary["final"]["rounds"]
    rows = {r["dimension"]: r for r in summary["rows"]}
    assert rows["intra_op"]["p50_before_ms"] > 0 and rows["intra_op"]["gain_pct"] is not None
    assert rows["gpu_memory_fraction"]["verdict"].startswith("skipped: no GPU")
    text = (tmp_path / "tune.md").read_text()
    assert "| intra-op threads (--tensorflow_intra_op_parallelism) | auto (" in text
    assert "## Combined best against the default" in text and "## Flags to use" in text
    assert (tmp_path / "batching.config").exists() == (summary["recommended"]["batching_config"] is not None)
    assert (tmp_path / "tune.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
