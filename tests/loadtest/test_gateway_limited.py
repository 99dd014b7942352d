"""A load through the gateway counts the limiter's refusals apart from the server's own (no server here).

The summary of a locust run and a sweep's levels classify failures: the gateway
limiter's (REST 429 / gRPC RESOURCE_EXHAUSTED with its message) as
``gateway_limited``, everything else (a full batching queue is RESOURCE_EXHAUSTED
too) as ``server``. The real gateway's refusals are tests/loadtest/test_through_gateway.py's.
"""
from __future__ import annotations

import json

from loadtest import refusals, runner, sweep
from loadtest.driver import Record
from serving.stack.endpoint import GATEWAY_LIMIT_MESSAGE

QUEUE_FULL = "The batch scheduling queue to which this task was submitted is full"


def test_a_runs_summary_counts_failures_by_class(tmp_path):
    prefix = tmp_path / "steady_grpc"
    errors = {f"grpc Predict digits: ResourceExhausted('{GATEWAY_LIMIT_MESSAGE}')": 960,
              f"POST /v1/models/digits:predict: CatchResponseError('HTTP 429: {GATEWAY_LIMIT_MESSAGE}')": 4,
              f"grpc Predict digits: ResourceExhausted('{QUEUE_FULL}')": 3,
              "grpc Predict digits: Unavailable('connection refused')": 2}
    (tmp_path / "steady_grpc_final.json").write_text(json.dumps(
        {"requests": 1000, "failures": 969, "rps": 100.0, "avg_ms": 1.0, "max_ms": 2.0, "errors": errors}))
    summary = runner.summarize_csv(prefix)
    assert summary["failures_by_class"] == {"gateway_limited": 964, "server": 5}
    assert summary["gateway_limited_ratio"] == 0.964
    line = refusals.limiter_line(summary["failures_by_class"]["gateway_limited"], summary["requests"])
    assert line == ("the gateway limited 96.4 % of requests: this measured GATEWAY_RATE (use the loadtest "
                    "credential, or raise GATEWAY_LOADTEST_RATE)")


def test_no_refusal_no_limiter_line():
    assert refusals.limiter_line(0, 1000) is None
    assert refusals.failures_by_class({f"HTTP 429: {QUEUE_FULL}": 3}) == {"gateway_limited": 0, "server": 3}


def _level(level, limited, served, server_errors=0):
    records = ([Record(1.0 + i * 1e-3, 0.001) for i in range(served)]
               + [Record(1.5, 0.001, "RESOURCE_EXHAUSTED", GATEWAY_LIMIT_MESSAGE)] * limited
               + [Record(1.5, 0.001, "HTTP 503", "overloaded")] * server_errors)
    window = sweep._Window(0.0, 2.0, records, 0.1, None, None, None)
    return sweep._summarise(level, sweep.SweepSettings(), [window], True, 1, 0)


def test_a_sweep_marks_the_level_where_the_limiter_began(tmp_path):
    levels = [_level(1, 0, 100, server_errors=1), _level(4, 0, 200), _level(16, 300, 200)]
    assert [r.gateway_limited for r in levels] == [0, 0, 300]
    assert levels[0].error_kinds == {"HTTP 503": 1}
    assert levels[2].error_kinds == {"gateway limited": 300}
    series = sweep.Series("digits/grpc/batching-running", "digits", "grpc", "running", levels)
    series.limiter_began_at = sweep.limiter_began_at(levels)
    assert series.limiter_began_at == 16
    table = sweep.format_table(series)
    assert "GATEWAY-LIMITED 60%" in table.splitlines()[-2]
    assert "the gateway's limiter began at level 16" in table and "the gateway limited 60.0 % of requests" in table
    paths = sweep.write_outputs([series], tmp_path, {"title": "t"})
    doc = json.loads(paths["json"].read_text())
    assert doc["series"][0]["limiter_began_at"] == 16
    assert doc["series"][0]["levels"][2]["gateway_limited"] == 300
    assert paths["csv"].read_text().splitlines()[0].endswith("gateway_limited")
    assert paths["png"].stat().st_size > 0


def test_a_sweep_the_limiter_never_reached_marks_nothing():
    levels = [_level(1, 0, 100), _level(2, 0, 150)]
    assert sweep.limiter_began_at(levels) is None
    assert "limiter" not in sweep.format_table(sweep.Series("s", "digits", "grpc", "running", levels))


def test_the_plot_rings_the_level_where_the_limiter_began():
    from loadtest import plots
    levels = [_level(1, 0, 100), _level(16, 300, 200)]
    series = sweep.Series("s", "digits", "grpc", "running", levels, limiter_began_at=16)
    figure = plots.throughput_latency_figure([series])
    labels = [line.get_label() for ax in figure.axes for line in ax.get_lines()]
    assert sum("gateway limiter began" in label for label in labels) == 2
