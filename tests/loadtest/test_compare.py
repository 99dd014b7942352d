"""``python -m loadtest compare``: reading sweep, tune and generic results; the noise-aware verdict (fast)."""
from __future__ import annotations

import json

import pytest

from loadtest import compare
from loadtest.__main__ import main


def _sweep(path, rps, p50, windows=None, label="digits/grpc/batching-off"):
    levels = [{"level": lvl, "throughput_rps": r, "p50_ms": p, "p99_ms": 3 * p,
               "window_rps": windows[i] if windows else []} for i, (lvl, r, p) in enumerate(zip((1, 8), rps, p50))]
    path.write_text(json.dumps({"meta": {}, "series": [{"label": label, "levels": levels}]}))
    return path


def test_a_loss_beyond_the_limit_and_the_noise_is_a_regression_and_exits_1(tmp_path, capsys):
    base = _sweep(tmp_path / "a.json", (500, 1500), (2.0, 5.0))
    cand = _sweep(tmp_path / "b.json", (500, 1200), (2.0, 5.0))
    assert main(["compare", str(base), str(cand), "--max-regression", "5%"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "-20.0%" in out


def test_the_same_numbers_pass(tmp_path, capsys):
    base = _sweep(tmp_path / "a.json", (500, 1500), (2.0, 5.0))
    assert main(["compare", str(base), str(base)]) == 0
    assert "PASS" in capsys.readouterr().out


def test_a_loss_within_the_measured_window_spread_is_noise(tmp_path):
    windows = [[480, 520], [1200, 1800]]  # level 8 swung ±20 % between its own windows
    base = compare.load_result(_sweep(tmp_path / "a.json", (500, 1500), (2.0, 5.0), windows))
    cand = compare.load_result(_sweep(tmp_path / "b.json", (500, 1300), (2.0, 5.0), windows))
    verdicts = {(v.level, v.metric): v for v in compare.compare_results(base, cand, max_regression=0.05)}
    assert verdicts[(8, "throughput_rps")].verdict == "within noise"
    # each side's spread is half its windows' range over its value: 300/1500 and 300/1300
    assert verdicts[(8, "throughput_rps")].band == pytest.approx((0.2 ** 2 + (300 / 1300) ** 2) ** 0.5)


def test_latency_gets_worse_upwards_and_rounds_give_the_mean_and_spread(tmp_path):
    def result(*p50s):
        rounds = [{"p50_ms": p50, "throughput_rps": 100} for p50 in p50s]
        return {"series": [{"label": "peer/rest", "levels": [{"level": "c8", "rounds": rounds}]}]}

    doc, worse = result(10.0, 12.0), result(20.0, 21.0)
    (tmp_path / "a.json").write_text(json.dumps(doc))
    (tmp_path / "b.json").write_text(json.dumps(worse))
    base, cand = compare.load_result(tmp_path / "a.json"), compare.load_result(tmp_path / "b.json")
    assert base["peer/rest"]["c8"]["p50_ms"].value == 11.0 and base["peer/rest"]["c8"]["p50_ms"].source == "rounds"
    (p50,) = [v for v in compare.compare_results(base, cand) if v.metric == "p50_ms"]
    assert p50.verdict == "regression" and p50.worse_by == pytest.approx(20.5 / 11 - 1)


def test_files_with_nothing_in_common_or_no_series_exit_2(tmp_path, capsys):
    a = _sweep(tmp_path / "a.json", (1, 1), (1, 1), label="x")
    b = _sweep(tmp_path / "b.json", (1, 1), (1, 1), label="y")
    assert main(["compare", str(a), str(b)]) == 2
    assert "no series and level in common" in capsys.readouterr().err
    (tmp_path / "c.json").write_text("{}")
    assert main(["compare", str(a), str(tmp_path / "c.json")]) == 2
    assert "no \"series\" list" in capsys.readouterr().err


@pytest.mark.parametrize("series, message", [
    ([{"label": "x", "levels": [{"level": 8, "throughput_rps": "fast"}]}], "level 8: throughput_rps is a number"),
    ([{"label": "x", "levels": [{"level": 8, "rounds": 5}]}], "level 8: rounds is a list"),
    ([{"label": "x", "levels": [{"level": 8, "throughput_rps": 1.0, "window_rps": 3}]}], "window_rps is a list"),
    ([{"label": "x", "levels": [{"level": [8], "throughput_rps": 1.0}]}], "\"level\" is a number or a string"),
    ([{"label": "x", "levels": [8]}], "series x: a level without \"level\""),
    (["x"], "every series needs a \"label\""),
])
def test_a_value_of_the_wrong_type_exits_2_naming_where_it_is(tmp_path, capsys, series, message):
    # each of these used to escape as a Python exception (ValueError, TypeError, AttributeError), not exit 2
    good = _sweep(tmp_path / "a.json", (1, 1), (1, 1), label="x")
    (tmp_path / "bad.json").write_text(json.dumps({"series": series}))
    assert main(["compare", str(good), str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert message in err and "bad.json" in err


@pytest.mark.parametrize("text, value", [("5%", 0.05), ("5", 0.05), ("0.05", 0.05), ("12.5%", 0.125)])
def test_max_regression_reads_percent_or_fraction(text, value):
    assert compare.parse_fraction(text) == pytest.approx(value)
