"""The batching benchmark's report logic: targets from given cells (no servers), and its import is inert."""
from __future__ import annotations

import pytest

from benchmarks.batching import LOADS, batching_parameters, mean_batch, targets as declared
from benchmarks.runner import Cell, Compare, evaluate, print_report
from tests.support.recorded import cell, cells

DIGITS_1, DIGITS_32, DIGITS_GRPC_32, RESNET_8 = LOADS


def side(load, label: str, rates: list[float], p50: float = 0.001) -> Cell:
    return cell(label, load, rates, latency=p50, seconds=10.0)


def targets(off_32, on_32, p50_off, p50_on, off_8, on_8, grpc_off_32=(900.0,), grpc_on_32=(900.0,)):
    measured = cells(side(DIGITS_1, "off", [500.0], p50_off), side(DIGITS_1, "on", [500.0], p50_on),
                     side(DIGITS_32, "off", off_32), side(DIGITS_32, "on", on_32),
                     side(DIGITS_GRPC_32, "off", list(grpc_off_32)), side(DIGITS_GRPC_32, "on", list(grpc_on_32)),
                     side(RESNET_8, "off", off_8), side(RESNET_8, "on", on_8))
    return {t.name.split(":")[0]: t for t in evaluate(declared(batch_timeout_micros=1000), measured)}


def test_all_four_targets_pass_when_batching_never_costs():
    found = targets([1000.0] * 3, [1000.0] * 3, 0.0010, 0.0024, [10.0] * 3, [11.0] * 3)
    assert set(found) == {"digits rest c=32", "digits grpc c=32", "digits rest c=1", "resnet50 grpc c=8"}
    assert all(t.passed for t in found.values())
    assert found["digits rest c=1"].ratio == pytest.approx(1.4) and found["digits rest c=1"].limit == 1.5


@pytest.mark.parametrize("missed, args", [
    ("digits rest c=32", ([1000.0] * 3, [990.0] * 3, 0.001, 0.001, [10.0] * 3, [11.0] * 3)),
    ("digits rest c=1", ([1000.0] * 3, [1000.0] * 3, 0.0010, 0.0026, [10.0] * 3, [11.0] * 3)),
    ("resnet50 grpc c=8", ([1000.0] * 3, [1000.0] * 3, 0.001, 0.001, [10.0] * 3, [10.9] * 3)),
    ("digits grpc c=32", ([1000.0] * 3, [1000.0] * 3, 0.001, 0.001, [10.0] * 3, [11.0] * 3, [900.0], [890.0])),
])
def test_each_target_fails_alone_when_its_figure_misses(missed, args):
    found = targets(*args)
    assert [name for name, t in found.items() if not t.passed] == [missed]


def test_rate_ratio_is_the_median_of_the_rounds_so_one_noisy_round_cannot_decide():
    off = side(DIGITS_32, "off", [1000.0, 1000.0, 300.0])  # the machine was busy during one "off" window
    on = side(DIGITS_32, "on", [950.0, 980.0, 1000.0])
    ratio = Compare("", ("on", DIGITS_32), ("off", DIGITS_32), 1.0).target(cells(off, on))
    assert ratio.ratio == pytest.approx(0.98)
    assert on.figure("rate") / off.figure("rate") > 1.0  # the pooled ratio would have passed


def test_the_batching_side_uses_issue_14s_parameters_with_one_thread_per_core():
    params = batching_parameters(2)
    assert params["num_batch_threads"] == 2 and params["batch_timeout_micros"] == 1000
    assert params["max_execution_batch_size"] == 32


def test_the_report_prints_the_mean_batch_of_the_batching_side(capsys):
    off, on = side(DIGITS_32, "off", [1000.0]), side(DIGITS_32, "on", [1000.0])
    on.counted = {"rows": 3000.0, "batches": 1000.0}
    measured = cells(off, on)
    print_report(measured, declared(), baseline="off", columns={"batch": mean_batch})
    lines = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("digits")]
    assert [line[-2] for line in lines[:2]] == ["-", "3.0"]
