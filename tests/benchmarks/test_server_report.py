"""The server benchmark's report logic: targets and the batching bound, from given cells (no servers)."""
from __future__ import annotations

import pytest

from benchmarks.runner import Cell, Load, evaluate
from benchmarks.server import batching_bound, notes, targets
from tests.support.recorded import cell, cells


def local(model: str, threads: int, batch: int, rows_per_s: float, latency: float, server: str = "servable") -> Cell:
    """An in-process cell: ``rows_per_s`` rows/s of ``batch`` rows per call from ``threads`` threads."""
    return cell(server, Load(model, "in-process", threads, batch), [rows_per_s / batch], latency=latency,
                seconds=10.0)


def served(server: str, model: str, protocol: str, concurrency: int, rate: float, latency: float) -> Cell:
    return cell(server, Load(model, protocol, concurrency), [rate], latency=latency, seconds=10.0)


def _points(canned: float, off: float, on: float, in_process: float) -> list[Cell]:
    return [local("digits", 2, 32, in_process, 0.001),
            local("digits", 1, 1, in_process / 10, 0.0003),
            served("off", "digits", "grpc", 32, off, 0.03),
            served("on", "digits", "grpc", 32, on, 0.03),
            served("off", "digits", "grpc", 1, off / 4, 0.0012),
            served("canned", "digits", "grpc", 32, canned, 0.01)]


def _evaluate(*made: Cell):
    measured = cells(*made)
    return evaluate(targets(measured), measured)


def test_bound_adds_cpu_seconds_per_request():
    ideal, ratio = batching_bound(canned_rps=2000.0, model_rows_per_s=2000.0, no_batching_rps=500.0)
    assert ideal == pytest.approx(1000.0)
    assert ratio == pytest.approx(2.0)


def test_notes_say_when_the_target_is_out_of_reach():
    lines = notes(cells(*_points(canned=1000, off=900, on=800, in_process=5000)))
    assert "833 req/s = 0.93x no batching" in lines[-1]
    assert "out of reach" in lines[-1]


def test_notes_stay_quiet_about_reach_when_the_bound_allows_the_target():
    lines = notes(cells(*_points(canned=2555, off=852, on=758, in_process=41280)))
    assert "2406 req/s = 2.82x no batching" in lines[-1]
    assert "out of reach" not in lines[-1]


def test_batching_target_passes_and_fails_on_the_ratio():
    ratio_target = {t.name: t for t in _evaluate(*_points(canned=9000, off=1000, on=1010, in_process=40000))}
    assert ratio_target["digits gRPC c=32: batching / no batching (req/s)"].passed
    ratio_target = {t.name: t for t in _evaluate(*_points(canned=9000, off=1000, on=990, in_process=40000))}
    assert not ratio_target["digits gRPC c=32: batching / no batching (req/s)"].passed


def test_resnet50_target_uses_the_points_measured_in_turn_when_there_are_some():
    points = [local("resnet50", 2, 4, 20.0, 0.2),     # a fast minute, long before
              served("on", "resnet50", "grpc", 8, 15.0, 0.5),
              local("resnet50", 2, 4, 16.0, 0.25, server="servable, paired"),
              served("on, paired", "resnet50", "grpc", 8, 15.0, 0.5)]
    (target,) = [t for t in _evaluate(*points) if t.name.startswith("resnet50")]
    assert "measured in turn" in target.name
    assert target.ratio == pytest.approx(15.0 / 16.0) and target.passed
    (unpaired,) = [t for t in _evaluate(*points[:2]) if t.name.startswith("resnet50")]
    assert unpaired.ratio == pytest.approx(0.75) and not unpaired.passed


def test_added_latency_uses_the_points_measured_in_turn_when_there_are_some():
    points = [local("digits", 1, 1, 3000.0, 0.0003),
              served("off", "digits", "grpc", 1, 300.0, 0.0030),       # a slow minute, measured later
              local("digits", 1, 1, 2000.0, 0.0005, server="servable, paired"),
              served("off, paired", "digits", "grpc", 1, 600.0, 0.0016)]
    (target,) = _evaluate(*points)
    assert "measured in turn" in target.name
    assert target.ratio == pytest.approx(1.1) and target.passed
