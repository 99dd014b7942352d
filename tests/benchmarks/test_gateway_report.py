"""The gateway benchmark's verdicts and table, from hand-written cells (recorded input, not a measurement:
the benchmark itself needs the compose stack on a Docker engine)."""
from __future__ import annotations

from benchmarks.gateway import LOADS, targets
from benchmarks.runner import Cells, Load, evaluate, print_table
from tests.support.recorded import cell, cells


def results(gateway_rps: float, gateway_p50: float) -> Cells:
    out = []
    for load in LOADS:
        out.append(cell("direct", load, [1000.0] * 3, latency=0.001))
        out.append(cell("gateway", load, [gateway_rps] * 3, latency=gateway_p50 / 1e3))
    return cells(*out)


def test_a_cheap_gateway_passes_every_target():
    found = evaluate(targets(), results(950.0, 1.5))
    assert len(found) == 4 and all(t.passed for t in found)


def test_a_gateway_losing_a_fifth_of_the_throughput_fails_the_c32_targets():
    failed = [t.name for t in evaluate(targets(), results(800.0, 1.5)) if not t.passed]
    assert failed == ["digits grpc c=32 throughput, gateway / direct", "digits rest c=32 throughput, gateway / direct"]


def test_two_milliseconds_added_at_c1_fails_the_latency_targets():
    failed = [t.name for t in evaluate(targets(), results(950.0, 3.0)) if not t.passed]
    assert failed == ["digits grpc c=1 p50 added by the gateway", "digits rest c=1 p50 added by the gateway"]


def test_the_table_prints_a_row_per_load_and_side_with_the_gateways_ratio_and_added_p50(capsys):
    print_table(results(900.0, 1.25), baseline="direct")
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 + 2 * len(LOADS)            # a header, its rule, a direct and a gateway row per load
    assert lines[2].split()[3] == "direct" and "0.90x" not in lines[2]
    assert lines[3].split()[3] == "gateway" and "0.90x" in lines[3] and "0.25 ms" in lines[3]
    assert Load("digits", "grpc", 1) == LOADS[0]
