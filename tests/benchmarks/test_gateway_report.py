"""The gateway benchmark's verdicts and table, from hand-written results (recorded input, not a measurement:
the benchmark itself needs the compose stack on a Docker engine)."""
from __future__ import annotations

from benchmarks.gateway import LOADS, Load, Result, evaluate, print_table


def results(gateway_rps: float, gateway_p50: float) -> list[Result]:
    out = []
    for load in LOADS:
        out.append(Result(load, "direct", 1000.0, 1.0, 0))
        out.append(Result(load, "gateway", gateway_rps, gateway_p50, 0))
    return out


def test_a_cheap_gateway_passes_every_target():
    targets = evaluate(results(950.0, 1.5))
    assert len(targets) == 4 and all(t.passed for t in targets)


def test_a_gateway_losing_a_fifth_of_the_throughput_fails_the_c32_targets():
    failed = [t.name for t in evaluate(results(800.0, 1.5)) if not t.passed]
    assert failed == ["digits grpc c=32 throughput, gateway / direct", "digits rest c=32 throughput, gateway / direct"]


def test_two_milliseconds_added_at_c1_fails_the_latency_targets():
    failed = [t.name for t in evaluate(results(950.0, 3.0)) if not t.passed]
    assert failed == ["digits grpc c=1 p50 added by the gateway", "digits rest c=1 p50 added by the gateway"]


def test_the_table_prints_one_row_per_load_with_ratio_and_added_p50(capsys):
    print_table(results(900.0, 1.25))
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 + len(LOADS)
    assert "0.90x" in lines[1] and "0.25 ms" in lines[1]
    assert Load("digits", "grpc", 1) == LOADS[0]
