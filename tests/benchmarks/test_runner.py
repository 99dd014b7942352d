"""``benchmarks.runner``: the rounds' order, pooling, counters and targets, on in-process stand-in servers
(calls that return at once through ``loadtest.driver``'s closed loop; no model, no server process)."""
from __future__ import annotations

import contextlib
import itertools
import math
from typing import Sequence

import pytest

from benchmarks.runner import Compare, Load, Scenario, Served, Server, evaluate, run, to_json
from loadtest.driver import Connection
from tests.support.recorded import cell, cells

DIGITS, RESNET = Load("digits", "grpc", 1), Load("resnet50", "grpc", 1)


def stand_in(name: str, events: list[str], only: tuple[Load, ...] = (), counted: bool = False) -> Server:
    """A server whose every call returns at once; ``events`` records its starts, stops and connections."""
    ticks = itertools.count()

    def start(stack: contextlib.ExitStack, models: Sequence[str]) -> Served:
        events.append(f"start {name} {','.join(models)}")
        stack.callback(events.append, f"stop {name}")

        def transport(load: Load):
            def connect() -> Connection:   # once per load of one client
                events.append(f"{name} {load.model}")
                return Connection(lambda: b"answer")
            return connect

        return Served(transport, counters=(lambda: {"ticks": float(next(ticks))}) if counted else None)

    return Server(name, start, only)


def test_every_pair_is_measured_each_round_with_the_first_server_rotating():
    events: list[str] = []
    measured = run(Scenario([stand_in("a", events), stand_in("b", events)], [DIGITS], rounds=3, warmup=0.0,
                            duration=0.02))
    windows = [e for e in events if not e.startswith(("start", "stop"))][2:]   # after one checked call each
    assert windows == ["a digits", "b digits", "b digits", "a digits", "a digits", "b digits"]
    assert [len(c.windows) for c in measured.values()] == [3, 3]
    assert all(c.figure("rate") > 0 and c.pooled.requests == sum(w.requests for w in c.windows)
               for c in measured.values())


def test_per_model_starts_only_the_servers_a_model_has_loads_for_and_stops_them_before_the_next():
    events: list[str] = []
    servers = [stand_in("a", events), stand_in("b", events, only=(RESNET,))]
    measured = run(Scenario(servers, [DIGITS, RESNET], rounds=1, warmup=0.0, duration=0.02, per_model=True))
    assert [e for e in events if e.startswith(("start", "stop"))] == [
        "start a digits", "stop a", "start a resnet50", "start b resnet50", "stop b", "stop a"]
    assert set(measured) == {("a", DIGITS), ("a", RESNET), ("b", RESNET)}


def test_counters_count_each_window_alone_with_the_warmup_apart():
    events: list[str] = []
    measured = run(Scenario([stand_in("a", events, counted=True)], [DIGITS], rounds=2, warmup=0.01,
                            duration=0.02))
    (only,) = measured.values()
    assert only.counted == {"ticks": 2.0}    # read 4 times (0, 1, 2, 3): each window adds 1
    assert events.count("a digits") == 1 + 2 * 2   # the check, then a warmup load and a window each round


def test_a_ratio_is_the_median_of_the_rounds_and_a_missing_cell_falls_back():
    measured = cells(cell("on", DIGITS, [900.0, 1100.0, 300.0]), cell("off", DIGITS, [1000.0, 1000.0, 1000.0]))
    fallback = Compare("fallback", ("on", DIGITS), ("off", DIGITS), 1.0)
    ratio = Compare("{rounds} rounds, pooled {pooled:.2f}x", ("on", DIGITS), ("off", DIGITS), 1.0)
    (median,) = evaluate([ratio], measured)
    assert median.ratio == pytest.approx(0.9) and median.name == "3 rounds, pooled 0.77x" and not median.passed
    (fell,) = evaluate([Compare("absent", ("gone", DIGITS), ("off", DIGITS), 1.0, fallback=fallback)], measured)
    assert fell.name == "fallback"
    assert evaluate([Compare("absent", ("gone", DIGITS), ("off", DIGITS), 1.0)], measured) == []
    assert evaluate([Compare("information", ("on", DIGITS), ("off", DIGITS), None)], measured) == []


def test_latency_is_compared_as_the_milliseconds_added():
    measured = cells(cell("on", DIGITS, [100.0], latency=0.0035), cell("off", DIGITS, [100.0], latency=0.002))
    (added,) = evaluate([Compare("added", ("on", DIGITS), ("off", DIGITS), 1.0, metric="p50")], measured)
    assert added.ratio == pytest.approx(1.5) and added.unit == " ms" and not added.passed


def test_the_json_of_a_cell_without_windows_says_nan_not_zero():
    doc = to_json("b", cells(cell("a", DIGITS, [])))
    assert math.isnan(doc["series"][0]["levels"][0]["throughput_rps"])
