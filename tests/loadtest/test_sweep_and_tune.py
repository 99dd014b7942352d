"""The sweep against the running embedded server, and one bounded tuner run that restarts it."""
from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from tests.support.servers import REPO_ROOT

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


def test_tuner_restarts_the_server_with_the_candidate_and_writes_the_config(model_repo, tmp_path):
    from serving.config import load_batching_parameters

    out = run_cli("tune", "--model-repo", str(model_repo), "--p99-budget-ms", "2000", "--max-trials", "1",
                  "--concurrency", "1,2", "--window", "0.5", "--max-level-time", "3", "--rounds", "1",
                  "--final-rounds", "1", "--out", str(tmp_path),
                  timeout=400)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((tmp_path / "tune.json").read_text())
    search, off = summary["trials"][0], summary["trials"][1]
    # each candidate was swept in turn with the baseline server, which stayed up
    assert search["label"] == "search" and search["score_rps"] > 0 and search["baseline_rps"] > 0, out.stdout
    assert search["ratio"] == pytest.approx(search["score_rps"] / search["baseline_rps"])
    assert (tmp_path / "trials" / "baseline" / "batching.config").exists()
    # the server of trial 0 ran with the candidate written as a BatchingParameters file
    trial_config = load_batching_parameters(tmp_path / "trials" / "00" / "batching.config")
    assert trial_config.max_batch_size.value == search["params"]["max_batch_size"]
    # serving without batching is a candidate too: its server got no batching file
    assert off["label"] == "off" and off["params"] == {} and off["score_rps"] > 0
    assert not (tmp_path / "trials" / "01" / "batching.config").exists()
    assert summary["final"] and isinstance(summary["enable_batching"], bool)
    written = tmp_path / "batching.config"
    text = written.read_text()
    assert text.startswith("# Tuned by `python -m loadtest tune`") and "Measured table" in text
    assert "Final check of" in text
    best = load_batching_parameters(written)
    assert best.max_batch_size.value == summary["chosen"]["max_batch_size"]
    assert (tmp_path / "tune.csv").read_text().startswith("trial,label,num_batch_threads")
