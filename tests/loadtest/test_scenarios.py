"""Each locust scenario, briefly, against the embedded server: ``python -m loadtest run`` as a subprocess."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from serving.checkout import REPO_ROOT


pytestmark = pytest.mark.slow


def run_loadtest(*args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loadtest", "run", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout)


def _server(server, protocol: str) -> list[str]:
    return ["--grpc", server.grpc_target] if protocol == "grpc" else ["--rest", server.rest_url]


@pytest.mark.parametrize("scenario, protocol, extra", [
    ("steady", "grpc", []),
    ("steady", "rest", []),
    ("ramp", "grpc", []),
    ("spike", "rest", []),
    ("soak", "grpc", ["--", "--user-rps", "10"]),
])
def test_scenario_makes_requests_without_failures(digits_server, model_repo, tmp_path, scenario, protocol, extra):
    out = run_loadtest(scenario, *_server(digits_server, protocol),
                       "--run-time", "5s", "-u", "4", "--model-repo", str(model_repo), "--out", str(tmp_path),
                       *extra)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(Path(tmp_path, f"{scenario}_{protocol}_summary.json").read_text())
    assert summary["requests"] > 0
    assert summary["failures"] == 0, summary["failures_by_error"]
    assert summary["run_ok"] and summary["passed"]
    # percentiles come from every response time locust saw, not its rounded buckets
    assert summary["percentiles"] == "exact" and summary["latency_samples"] == summary["requests"]
    assert summary["totals"] == "final"
    assert Path(tmp_path, f"{scenario}_{protocol}.html").stat().st_size > 0
    assert Path(tmp_path, f"{scenario}_{protocol}_stats.csv").exists()


def test_soak_paces_each_user(digits_server, model_repo, tmp_path):
    out = run_loadtest("soak", "--grpc", digits_server.grpc_target, "--run-time", "6s", "-u", "2",
                       "--model-repo", str(model_repo), "--out", str(tmp_path), "--", "--user-rps", "5")
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(Path(tmp_path, "soak_grpc_summary.json").read_text())
    # 2 users x 5 req/s: paced, not a closed loop (which would reach hundreds per second). The
    # count depends on how long locust takes to start on a loaded machine; the rate does not.
    assert 0 < summary["requests"] <= 80
    assert summary["rps"] <= 2 * 5 * 1.5, summary


@pytest.mark.parametrize("protocol", ["grpc", "rest"])
def test_impossible_p99_gate_exits_non_zero_naming_the_gate(digits_server, model_repo, tmp_path, protocol):
    out = run_loadtest("steady", *_server(digits_server, protocol),
                       "--run-time", "3s", "-u", "2", "--model-repo", str(model_repo), "--out", str(tmp_path),
                       "--p99-ms", "0.0001")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "SLO gate p99_ms: measured" in out.stderr and "BROKEN" in out.stderr
    summary = json.loads(Path(tmp_path, f"steady_{protocol}_summary.json").read_text())
    assert summary["requests"] > 0 and summary["passed"] is False


def test_min_throughput_gate_from_a_file_exits_non_zero(digits_server, model_repo, tmp_path):
    slo = tmp_path / "slo.json"
    slo.write_text(json.dumps({"min_rps": 1e9}))
    out = run_loadtest("steady", "--grpc", digits_server.grpc_target, "--run-time", "3s", "-u", "2",
                       "--model-repo", str(model_repo), "--out", str(tmp_path), "--slo-file", str(slo))
    assert out.returncode == 1
    assert "SLO gate min_rps" in out.stderr


def test_unknown_model_is_refused_before_the_run_with_the_servers_not_found(digits_server, model_repo, tmp_path):
    out = run_loadtest("steady", "--grpc", digits_server.grpc_target, "--run-time", "3s", "-u", "1",
                       "--model-repo", str(model_repo), "--out", str(tmp_path), "--model", "text",
                       "--max-failure-ratio", "0")
    # text is exported but not served here: the preflight's metadata call says so, and nothing runs
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().splitlines()[-1] == (
        f"python -m loadtest run: error: --grpc {digits_server.grpc_target}: model 'text' is not served there: "
        "Servable not found for request: Latest(text)")
    assert not Path(tmp_path, "steady_grpc_summary.json").exists()
