"""The server benchmark's report logic: targets and the batching bound, from given points (no servers)."""
from __future__ import annotations

import pytest

from benchmarks.server import Point, batching_bound, evaluate, notes


def _points(canned: float, off: float, on: float, in_process: float) -> list[Point]:
    return [Point("digits", "in-process", "t2", 32, in_process, [0.001]),
            Point("digits", "in-process", "t1", 1, in_process / 10, [0.0003]),
            Point("digits", "grpc", "off", 32, off, [0.03]),
            Point("digits", "grpc", "on", 32, on, [0.03]),
            Point("digits", "grpc", "off", 1, off / 4, [0.0012]),
            Point("canned", "grpc", "-", 32, canned, [0.01])]


def test_bound_adds_cpu_seconds_per_request():
    ideal, ratio = batching_bound(canned_rps=2000.0, model_rows_per_s=2000.0, no_batching_rps=500.0)
    assert ideal == pytest.approx(1000.0)
    assert ratio == pytest.approx(2.0)


def test_notes_say_when_the_target_is_out_of_reach():
    lines = notes(_points(canned=1000, off=900, on=800, in_process=5000))
    assert "833 req/s = 0.93x no batching" in lines[-1]
    assert "out of reach" in lines[-1]


def test_notes_stay_quiet_about_reach_when_the_bound_allows_the_target():
    lines = notes(_points(canned=2555, off=852, on=758, in_process=41280))
    assert "2406 req/s = 2.82x no batching" in lines[-1]
    assert "out of reach" not in lines[-1]


def test_batching_target_passes_and_fails_on_the_ratio():
    ratio_target = {t.name: t for t in evaluate(_points(canned=9000, off=1000, on=1010, in_process=40000))}
    assert ratio_target["digits gRPC c=32: batching / no batching (req/s)"].passed
    ratio_target = {t.name: t for t in evaluate(_points(canned=9000, off=1000, on=990, in_process=40000))}
    assert not ratio_target["digits gRPC c=32: batching / no batching (req/s)"].passed


def test_resnet50_target_uses_the_points_measured_in_turn_when_there_are_some():
    points = [Point("resnet50", "in-process", "t2", 4, 20.0, [0.2]),     # a fast minute, long before
              Point("resnet50", "grpc", "on", 8, 15.0, [0.5]),
              Point("resnet50", "in-process", "paired", 4, 16.0, [0.25]),
              Point("resnet50", "grpc", "paired", 8, 15.0, [0.5])]
    (target,) = evaluate(points)
    assert "measured in turn" in target.name
    assert target.ratio == pytest.approx(15.0 / 16.0) and target.passed
    (unpaired,) = evaluate(points[:2])
    assert unpaired.ratio == pytest.approx(0.75) and not unpaired.passed


def test_added_latency_uses_the_points_measured_in_turn_when_there_are_some():
    points = [Point("digits", "in-process", "t1", 1, 3000.0, [0.0003] * 5),
              Point("digits", "grpc", "off", 1, 300.0, [0.0030] * 5),       # a slow minute, measured later
              Point("digits", "in-process", "paired", 1, 2000.0, [0.0005] * 5),
              Point("digits", "grpc", "paired", 1, 600.0, [0.0016] * 5)]
    (target,) = evaluate(points)
    assert "measured in turn" in target.name
    assert target.ratio == pytest.approx(1.1) and target.passed
