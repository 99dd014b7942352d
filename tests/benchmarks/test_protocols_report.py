"""The protocols benchmark's report logic: per-request CPU, ratios and targets, from given cells (no servers)."""
from __future__ import annotations

import math
import os
import time

import pytest

from benchmarks.protocols import targets
from benchmarks.runner import Cell, Load, evaluate, print_report
from loadtest.procfs import process_cpu_seconds
from tests.support.recorded import cell, cells, window

GRPC, REST = Load("digits", "grpc", 32), Load("digits", "rest", 32)


def _run(client: str, protocol: str, rate: float, cpu_ms: float) -> Cell:
    """8 s at ``rate`` with the server spending ``cpu_ms`` per request."""
    return cell(client, GRPC if protocol == "grpc" else REST, [rate], seconds=8.0, server_cpu_ms=cpu_ms,
                client_cpu_ms=0.1)


def _runs(grpc_rate: float, rest_rate: float, grpc_cpu_ms: float, rest_cpu_ms: float) -> list[Cell]:
    """SDK and lean runs with the given rates and server CPU-ms per request."""
    return [_run("sdk", "grpc", grpc_rate, grpc_cpu_ms), _run("sdk", "rest", rest_rate, rest_cpu_ms),
            _run("lean", "grpc", grpc_rate, grpc_cpu_ms), _run("lean", "rest", rest_rate, rest_cpu_ms)]


def _evaluate(runs: list[Cell]):
    return evaluate(targets(), cells(*runs))


def test_runs_pool_by_adding_requests_seconds_and_cpu():
    pooled = Cell("sdk", GRPC, [window(50, 2.0, server_cpu_ms=0.5), window(150, 2.0, server_cpu_ms=0.5)])
    assert pooled.figure("rate") == pytest.approx(100.0)
    assert pooled.figure("cpu") == pytest.approx(0.5)
    assert math.isnan(Cell("sdk", GRPC).figure("rate"))


def test_both_targets_pass_when_grpc_costs_no_more_and_is_no_slower():
    found = {t.name.split(" (")[0]: t for t in _evaluate(_runs(1500, 900, 0.50, 0.60))}
    assert found["server CPU per request, gRPC / REST"].ratio == pytest.approx(0.5 / 0.6)
    assert found["GrpcClient / RestClient requests/s"].ratio == pytest.approx(1500 / 900)
    assert all(t.passed for t in found.values())


def test_server_cpu_target_fails_when_grpc_costs_more_per_request():
    cpu, rate = _evaluate(_runs(1500, 900, 0.61, 0.60))
    assert not cpu.passed and rate.passed


def test_rate_target_fails_when_the_grpc_client_is_slower():
    cpu, rate = _evaluate(_runs(850, 900, 0.50, 0.60))
    assert cpu.passed and not rate.passed


def test_server_cpu_is_compared_under_the_lean_clients_when_they_ran():
    runs = [_run("sdk", "grpc", 1500, 0.50), _run("sdk", "rest", 900, 0.70),     # httpx inflates REST's cost
            _run("lean", "grpc", 2000, 0.45), _run("lean", "rest", 2000, 0.40)]
    cpu, rate = _evaluate(runs)
    assert "lean clients" in cpu.name and cpu.ratio == pytest.approx(0.45 / 0.40) and not cpu.passed
    assert rate.passed


def test_server_cpu_falls_back_to_the_sdk_clients():
    (cpu, _) = _evaluate(_runs(1500, 900, 0.5, 0.6)[:2])
    assert "sdk clients" in cpu.name and cpu.ratio == pytest.approx(0.5 / 0.6)


def test_lean_runs_alone_give_only_the_server_cpu_target():
    (cpu,) = _evaluate(_runs(1500, 900, 0.5, 0.6)[2:])
    assert "lean clients" in cpu.name


def test_report_prints_the_lean_ratio_and_a_verdict_per_target(capsys: pytest.CaptureFixture[str]):
    runs = cells(*_runs(1500, 900, 0.50, 0.40))
    print_report(runs, targets())
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
