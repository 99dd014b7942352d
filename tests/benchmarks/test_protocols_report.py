"""The protocols benchmark's report logic: per-request CPU, ratios and targets, from given runs (no servers)."""
from __future__ import annotations

import math
import os
import time

import pytest

from benchmarks.protocols import Run, evaluate, print_report
from loadtest.procfs import process_cpu_seconds


def _run(client: str, protocol: str, rate: float, cpu_ms: float) -> Run:
    """8 s at ``rate`` with the server spending ``cpu_ms`` per request."""
    requests = int(rate * 8)
    return Run(client, protocol, requests, 8.0, requests * cpu_ms / 1e3, requests * 0.1 / 1e3)


def _runs(grpc_rate: float, rest_rate: float, grpc_cpu_ms: float, rest_cpu_ms: float) -> list[Run]:
    """SDK and lean runs with the given rates and server CPU-ms per request."""
    return [_run("sdk", "grpc", grpc_rate, grpc_cpu_ms), _run("sdk", "rest", rest_rate, rest_cpu_ms),
            _run("lean", "grpc", grpc_rate, grpc_cpu_ms), _run("lean", "rest", rest_rate, rest_cpu_ms)]


def test_runs_pool_by_adding_requests_seconds_and_cpu():
    pooled = Run("sdk", "grpc", 100, 2.0, 0.05, 0.02) + Run("sdk", "grpc", 300, 2.0, 0.15, 0.04)
    assert pooled.rate == pytest.approx(100.0)
    assert pooled.ms_per_request(pooled.server_cpu) == pytest.approx(0.5)
    assert math.isnan(Run("sdk", "grpc", 0, 0.0, 0.0, 0.0).rate)


def test_both_targets_pass_when_grpc_costs_no_more_and_is_no_slower():
    targets = {t.name.split(" (")[0]: t for t in evaluate(_runs(1500, 900, 0.50, 0.60))}
    assert targets["server CPU per request, gRPC / REST"].ratio == pytest.approx(0.5 / 0.6)
    assert targets["GrpcClient / RestClient requests/s"].ratio == pytest.approx(1500 / 900)
    assert all(t.passed for t in targets.values())


def test_server_cpu_target_fails_when_grpc_costs_more_per_request():
    cpu, rate = evaluate(_runs(1500, 900, 0.61, 0.60))
    assert not cpu.passed and rate.passed


def test_rate_target_fails_when_the_grpc_client_is_slower():
    cpu, rate = evaluate(_runs(850, 900, 0.50, 0.60))
    assert cpu.passed and not rate.passed


def test_server_cpu_is_compared_under_the_lean_clients_when_they_ran():
    runs = [_run("sdk", "grpc", 1500, 0.50), _run("sdk", "rest", 900, 0.70),     # httpx inflates REST's cost
            _run("lean", "grpc", 2000, 0.45), _run("lean", "rest", 2000, 0.40)]
    cpu, rate = evaluate(runs)
    assert "lean clients" in cpu.name and cpu.ratio == pytest.approx(0.45 / 0.40) and not cpu.passed
    assert rate.passed


def test_server_cpu_falls_back_to_the_sdk_clients():
    (cpu, _) = evaluate(_runs(1500, 900, 0.5, 0.6)[:2])
    assert "sdk clients" in cpu.name and cpu.ratio == pytest.approx(0.5 / 0.6)


def test_lean_runs_alone_give_only_the_server_cpu_target():
    (cpu,) = evaluate(_runs(1500, 900, 0.5, 0.6)[2:])
    assert "lean clients" in cpu.name


def test_report_prints_the_lean_ratio_and_a_verdict_per_target(capsys: pytest.CaptureFixture[str]):
    runs = _runs(1500, 900, 0.50, 0.40)
    print_report(runs, evaluate(runs))
    out = capsys.readouterr().out
    assert "server CPU per request, gRPC / REST (lean clients): 1.25x" in out
    assert "server CPU per request, gRPC / REST (sdk clients): 1.25x" in out
    assert "FAIL  server CPU per request, gRPC / REST" in out
    assert "PASS  GrpcClient / RestClient requests/s" in out


def test_process_cpu_seconds_agrees_with_the_process_own_clock():
    before, own_before = process_cpu_seconds(os.getpid()), time.process_time()
    while time.process_time() - own_before < 0.5:
        sum(range(1000))
    used, own = process_cpu_seconds(os.getpid()) - before, time.process_time() - own_before
    assert used == pytest.approx(own, abs=0.05)   # /proc counts in clock ticks (10 ms)
