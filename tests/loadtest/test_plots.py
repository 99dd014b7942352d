"""The sweep PNG reads without a legend key: plain-number ticks at the measured levels, names a user says."""
from __future__ import annotations

import pytest

from loadtest import plots, sweep


def _level(level, rps, p99):
    return sweep.LevelResult(level=level, mode="concurrency", throughput_rps=rps, p50_ms=p99 / 2, p90_ms=p99,
                             p95_ms=p99, p99_ms=p99, avg_ms=p99 / 2, requests=100, errors=0, error_kinds={},
                             stable=True, windows=3, measured_s=3.0, client_cpu_pct=10.0)


def _series(batching: str, protocol: str = "grpc") -> sweep.Series:
    return sweep.Series(f"digits/{protocol}/batching-{batching}", "digits", protocol, batching,
                        levels=[_level(2, 300.0, 2.5), _level(8, 900.0, 7.0)])


def _tick_texts(axis) -> list[str]:
    return [t.get_text() for t in axis.get_ticklabels() + axis.get_ticklabels(minor=True) if t.get_text()]


def test_a_two_level_sweep_is_ticked_at_its_levels_in_plain_numbers(tmp_path):
    fig = plots.throughput_latency_figure([_series("running"), _series("running", "rest")])
    fig.canvas.draw()
    latency_ax, level_ax = fig.axes
    assert _tick_texts(level_ax.xaxis) == ["2", "8"]
    latency_ticks = _tick_texts(latency_ax.yaxis)
    assert latency_ticks and all(text.replace(".", "").isdigit() for text in latency_ticks), latency_ticks
    assert min(t.get_fontsize() for t in level_ax.get_xticklabels()) >= 10
    assert plots.plot_throughput_latency([_series("off")], tmp_path / "sweep.png").stat().st_size > 0


def test_series_are_named_by_model_and_api_and_batching_only_where_the_sweep_chose_it():
    fig = plots.throughput_latency_figure([_series("running"), _series("on", "rest")])
    names = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert names == ["digits over gRPC", "digits over REST, batching on"]
    assert not any("batching-running" in t.get_text() for t in fig.axes[0].get_legend().get_texts())


def test_the_tune_picture_draws_its_rows_and_refuses_a_gain_that_is_not_a_number(tmp_path):
    row = {"setting": "max_batch_size (rows per batch)", "tuned": "32", "gain_pct": 12.0, "spread_pct": None,
           "p50_before_ms": 2.0, "p50_after_ms": None}
    total = {"is_default": False, "gain_pct": 10.0, "spread_pct": 3.0, "p50_before_ms": 2.0, "p50_after_ms": 1.5}
    assert plots.plot_tune_rows([row], total, tmp_path / "tune.png").stat().st_size > 0
    with pytest.raises(ValueError, match="gain_pct is a number, not 'a lot'"):
        plots.plot_tune_rows([{**row, "gain_pct": "a lot"}], total, tmp_path / "bad.png")
