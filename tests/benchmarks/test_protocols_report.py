"""The protocols benchmark's report logic: per-request CPU, ratios and targets, from given runs (no servers)."""
from __future__ import annotations

import math
import os
import time

import pytest

from benchmarks.protocols import Run, evaluate, print_report, process_cpu_seconds


def _runs(grpc_rate: float, rest_rate: float, grpc_cpu_ms: float, rest_cpu_ms: float) -> list[Run]:
    """SDK and lean runs of 8 s each with the given rates and server CPU-ms per request."""
    def run(client: str, protocol: str, rate: float, cpu_ms: float) -> Run:
        requests = int(rate * 8)
        return Run(client, protocol, requests, 8.0, requests * cpu_ms / 1e3, requests * 0.1 / 1e3)
    return [run("sdk", "grpc", grpc_rate, grpc_cpu_ms), run("sdk", "rest", rest_rate, rest_cpu_ms),
            run("lean", "grpc", grpc_rate, grpc_cpu_ms), run("lean", "rest", rest_rate, rest_cpu_ms)]


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


def test_no_targets_without_both_sdk_runs():
    assert evaluate(_runs(1500, 900, 0.5, 0.6)[2:]) == []


def test_report_prints_the_lean_ratio_and_a_verdict_per_target(capsys: pytest.CaptureFixture[str]):
    runs = _runs(1500, 900, 0.50, 0.40)
    print_report(runs, evaluate(runs))
    out = capsys.readouterr().out
    assert "server CPU per request, gRPC / REST (lean clients): 1.25x" in out
    assert "FAIL  server CPU per request, gRPC / REST" in out
    assert "PASS  GrpcClient / RestClient requests/s" in out


def test_process_cpu_seconds_agrees_with_the_process_own_clock():
    before, own_before = process_cpu_seconds(os.getpid()), time.process_time()
    while time.process_time() - own_before < 0.5:
        sum(range(1000))
    used, own = process_cpu_seconds(os.getpid()) - before, time.process_time() - own_before
    assert used == pytest.approx(own, abs=0.05)   # /proc counts in clock ticks (10 ms)
