"""The one runner of the benchmarks: servers x loads in interleaved rounds, held to declared targets.

A benchmark is a declaration, a ``Scenario``: the servers it measures (``Server``: a name, and how to
start it in an ``ExitStack`` into a ``Served``: a transport per load, and the process whose CPU is
read), the loads it puts on them (``Load``: model, protocol, concurrency, rows per request), the
rounds, and its targets (``Compare``: a ratio or a difference between two cells, with a limit of
``benchmarks.targets``). ``run`` measures every (load, server) pair through ``loadtest.driver``'s
closed loop, round after round, the first server of each load rotating per round, so the shared
machine's drift hits every side alike; it pools each pair's windows into a ``Cell``. A comparison
is the median of the rounds' figures (each round measures both cells seconds apart, so a burst of
other work skews one round, not the result). ``print_report`` is the one table and
``write_json`` the one ``--json`` writer (``python -m loadtest compare``'s shape).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from benchmarks.targets import Target, print_verdicts
from loadtest.driver import Transport, Window, measure

__all__ = ["Cell", "Cells", "Compare", "Load", "Scenario", "Served", "Server", "add_arguments", "evaluate",
           "information", "machine_note", "print_report", "print_table", "run", "to_json", "write_json"]

logger = logging.getLogger("benchmarks.runner")


@dataclass(frozen=True)
class Load:
    """``concurrency`` closed-loop clients of ``model`` over ``protocol``, ``batch`` rows per request.

    ``protocol`` is what the server's transport makes of it: ``grpc``, ``rest``, or ``in-process``."""

    model: str
    protocol: str
    concurrency: int
    batch: int = 1

    @property
    def level(self) -> str:
        """``c32``, or ``c2 b8`` with 8 rows per request."""
        return f"c{self.concurrency}" + (f" b{self.batch}" if self.batch != 1 else "")


@dataclass(frozen=True)
class Served:
    """A started server: how a load calls it, and what a window reads of it.

    ``pid``: the process tree whose CPU a window reads (None: not read). ``counters``: read before and
    after each window; their differences are summed per cell (``Cell.counted``), and the warmup is then
    a load of its own, so they count the window alone. ``warm``: its calls need no warmup load.
    ``check`` is handed one answer per load before anything is timed, and raises when it is wrong.
    """

    transport: Callable[[Load], Transport]
    pid: Optional[int] = None
    counters: Optional[Callable[[], Mapping[str, float]]] = None
    warm: bool = False
    check: Callable[[Load, object], None] = lambda load, answer: None


@dataclass(frozen=True)
class Server:
    """A named server: ``start(stack, models)`` brings it up serving ``models`` until ``stack`` closes.

    With ``only``, it is measured under those loads alone (and not started for a model without one)."""

    name: str
    start: Callable[[contextlib.ExitStack, Sequence[str]], Served]
    only: tuple[Load, ...] = ()

    def serves(self, load: Load) -> bool:
        return not self.only or load in self.only


Side = tuple[str, Load]
"""A cell's key: (server name, load)."""


@dataclass
class Cell:
    """One server under one load: a window per round (``Window``s pool by adding)."""

    server: str
    load: Load
    windows: list[Window] = field(default_factory=list)
    counted: dict[str, float] = field(default_factory=dict)

    @property
    def pooled(self) -> Window:
        return sum(self.windows[1:], self.windows[0]) if self.windows else Window([], 0.0, 0.0)

    def figure(self, metric: str) -> float:
        """``metric`` (``FIGURES``) over the pooled rounds."""
        return FIGURES[metric](self.pooled, self.load)

    def per_round(self, metric: str) -> list[float]:
        return [FIGURES[metric](window, self.load) for window in self.windows]

    @property
    def spread(self) -> float:
        """Half the range of the rounds' requests/s over their mean, in % (0 with one round)."""
        rates = self.per_round("rate")
        return float((max(rates) - min(rates)) / 2 / np.mean(rates) * 100) if len(rates) > 1 and np.mean(rates) else 0.0


Cells = dict[Side, Cell]


def _cpu_ms(window: Window, seconds: Optional[float]) -> float:
    value = window.ms_per_request(seconds)
    return float("nan") if value is None else value


FIGURES: dict[str, Callable[[Window, Load], float]] = {
    "rate": lambda w, load: w.rate,                                   # requests/s
    "rows": lambda w, load: w.rate * load.batch,                      # rows/s
    "cpu": lambda w, load: _cpu_ms(w, w.server_cpu),                  # server CPU-ms per request
    "client_cpu": lambda w, load: _cpu_ms(w, w.client_cpu),           # this process's CPU-ms per request
    "p50": lambda w, load: w.percentile(50) * 1e3,                    # ms
    "p99": lambda w, load: w.percentile(99) * 1e3,                    # ms
}
HIGHER_IS_BETTER = {"rate": True, "rows": True, "cpu": False, "client_cpu": False, "p50": False, "p99": False}
DIFFERENCES = ("p50", "p99")
"""Latency is compared as a difference (ms added); every other figure as a ratio."""


@dataclass(frozen=True)
class Compare:
    """A target between two cells: ``of`` over ``to`` in ``metric`` (``of`` minus ``to`` for latency).

    The value is the median of the rounds' figures. ``name`` may hold ``{rounds}`` and ``{pooled}`` (the
    figure over the pooled rounds). ``limit`` None: printed as information, never a verdict. When a cell
    was not measured, ``fallback`` is evaluated instead (else the target is left out).
    """

    name: str
    of: Side
    to: Side
    limit: Optional[float]
    metric: str = "rate"
    fallback: Optional["Compare"] = None

    def _between(self, a: float, b: float) -> float:
        return a - b if self.metric in DIFFERENCES else a / b if b else float("nan")

    def target(self, cells: Cells) -> Optional[Target]:
        a, b = cells.get(self.of), cells.get(self.to)
        if not (a and b and a.windows and b.windows):
            return self.fallback.target(cells) if self.fallback else None
        figures = [v for v in map(self._between, a.per_round(self.metric), b.per_round(self.metric))
                   if not math.isnan(v)]
        value = float(np.median(figures)) if figures else float("nan")
        name = self.name.format(rounds=len(a.windows),
                                pooled=self._between(a.figure(self.metric), b.figure(self.metric)))
        return Target(name, value, float("nan") if self.limit is None else self.limit,
                      higher_is_better=HIGHER_IS_BETTER[self.metric],
                      unit=" ms" if self.metric in DIFFERENCES else "x")


def evaluate(compares: Sequence[Compare], cells: Cells) -> list[Target]:
    """The targets with a limit, from the cells they compare (or their fallbacks'), in declared order."""
    return [t for t in (c.target(cells) for c in compares if c.limit is not None) if t is not None]


def information(compares: Sequence[Compare], cells: Cells) -> list[str]:
    """``info  name: value``, one line per comparison without a limit whose cells were measured."""
    return [f"info  {t.name}: {t.ratio:.2f}{t.unit}"
            for t in (c.target(cells) for c in compares if c.limit is None) if t is not None]


@dataclass(frozen=True)
class Scenario:
    """Servers x loads, ``rounds`` times; per window ``warmup`` s of load, then ``duration`` s measured
    (``durations``: per model). With ``per_model`` the servers are started for one model at a time and
    stopped before the next one's."""

    servers: Sequence[Server]
    loads: Sequence[Load]
    targets: Sequence[Compare] = ()
    rounds: int = 3
    warmup: float = 1.0
    duration: float = 2.0
    durations: Mapping[str, float] = field(default_factory=dict)
    per_model: bool = False

    def seconds(self, load: Load) -> float:
        return self.durations.get(load.model, self.duration)


def run(scenario: Scenario) -> Cells:
    """Every (load, server) pair, one window each round; the first server of each load rotates per round."""
    cells: Cells = {}
    models = list(dict.fromkeys(load.model for load in scenario.loads))
    for group in ([m] for m in models) if scenario.per_model else [models]:
        loads = [load for load in scenario.loads if load.model in group]
        sides = {load: [s.name for s in scenario.servers if s.serves(load)] for load in loads}
        with contextlib.ExitStack() as stack:
            served = {s.name: s.start(stack, group) for s in scenario.servers if any(map(s.serves, loads))}
            for load, names in sides.items():
                for name in names:
                    _check(served[name], load)
                    cells[name, load] = Cell(name, load)
            for index in range(scenario.rounds):
                for load, names in sides.items():
                    first = index % len(names) if names else 0
                    for name in names[first:] + names[:first]:
                        _measure(served[name], cells[name, load], scenario, index)
    return cells


def _check(served: Served, load: Load) -> None:
    """One answer before anything is timed (a failed call raises)."""
    connection = served.transport(load)()
    try:
        served.check(load, connection.send())
    finally:
        connection.close()


def _measure(served: Served, cell: Cell, scenario: Scenario, index: int) -> None:
    load, seconds = cell.load, scenario.seconds(cell.load)
    transport, warmup = served.transport(load), 0.0 if served.warm else scenario.warmup
    if served.counters is None:
        window = measure(transport, load.concurrency, warmup, seconds, server_pid=served.pid)
    else:
        if warmup:
            measure(transport, load.concurrency, 0.0, warmup)
        before = served.counters()
        window = measure(transport, load.concurrency, 0.0, seconds, server_pid=served.pid)
        for key, value in served.counters().items():
            cell.counted[key] = cell.counted.get(key, 0.0) + value - before.get(key, 0.0)
    cell.windows.append(window)
    logger.info("round %d %s %s %s %s: %.1f req/s, p50 %.2f ms, server %.3f CPU-ms/req, %d errors%s", index + 1,
                load.model, load.protocol, load.level, cell.server, window.rate, window.percentile(50) * 1e3,
                FIGURES["cpu"](window, load), window.errors,
                f" (the first: {window.first_error})" if window.errors else "")


# ---------------------------------------------------------------------------- report

Column = Callable[[Cell], str]


def _number(value: float, spec: str) -> str:
    return "-" if math.isnan(value) else format(value, spec)


def print_table(cells: Cells, baseline: Optional[str] = None,
                columns: Optional[Mapping[str, Column]] = None) -> None:
    """One row per cell: rates, spread over rounds, latency, CPU per request; with ``baseline``, each other
    server's requests/s over the baseline's and the p50 it adds (medians of the rounds); then ``columns``."""
    columns = columns or {}
    rows_column = any(load.batch != 1 for _, load in cells)
    heads = ["model", "proto", "load", "server", "req/s", *(["rows/s"] if rows_column else []), "spread",
             "p50 ms", "p99 ms", "server CPU-ms/req", "client CPU-ms/req",
             *([f"/ {baseline}", "p50 added"] if baseline else []), *columns, "errors"]
    table = [heads]
    for (server, load), cell in cells.items():
        row = [load.model, load.protocol, load.level, server, _number(cell.figure("rate"), ".1f"),
               *([_number(cell.figure("rows"), ".1f")] if rows_column else []), f"±{cell.spread:.0f}%",
               _number(cell.figure("p50"), ".2f"), _number(cell.figure("p99"), ".2f"),
               _number(cell.figure("cpu"), ".3f"), _number(cell.figure("client_cpu"), ".3f")]
        if baseline:
            row += _against(cells, baseline, server, load)
        table.append(row + [column(cell) for column in columns.values()] + [str(cell.pooled.errors)])
    widths = [max(len(row[i]) for row in table) for i in range(len(heads))]
    lines = ["  ".join(text.ljust(w) if i < 4 else text.rjust(w) for i, (text, w) in enumerate(zip(row, widths)))
             for row in table]
    print("\n".join([lines[0], "-" * len(lines[0]), *lines[1:]]))


def _against(cells: Cells, baseline: str, server: str, load: Load) -> list[str]:
    if server == baseline or (baseline, load) not in cells:
        return ["-", "-"]
    ratio = Compare("", (server, load), (baseline, load), None).target(cells)
    added = Compare("", (server, load), (baseline, load), None, metric="p50").target(cells)
    return ["-" if ratio is None else f"{ratio.ratio:.2f}x", "-" if added is None else f"{added.ratio:+.2f} ms"]


def print_report(cells: Cells, compares: Sequence[Compare], remarks: Sequence[str] = (),
                 baseline: Optional[str] = None, columns: Optional[Mapping[str, Column]] = None) -> list[Target]:
    """The table, the information lines, one PASS/FAIL line per target, the remarks; returns the targets."""
    print_table(cells, baseline, columns)
    for line in information(compares, cells):
        print(line)
    targets = evaluate(compares, cells)
    print_verdicts(targets, remarks)
    return targets


def machine_note(load_before: float, how: str) -> str:
    """``NOTE  N cores; 1-min load average ... at the start, ... at the end (how)``."""
    return (f"NOTE  {len(os.sched_getaffinity(0))} cores; 1-min load average {load_before:.1f} at the start, "
            f"{os.getloadavg()[0]:.1f} at the end ({how})")


def to_json(benchmark: str, cells: Cells) -> dict:
    """The cells in ``python -m loadtest compare``'s generic shape: a series per model, protocol and server
    (``digits/grpc/on``), a level per load (``c8``; ``c2 b8``), each round a measurement of the level.
    ``throughput_rps`` is rows/s (requests/s with one row per request)."""
    series: dict[str, list[dict]] = {}
    for (server, load), cell in cells.items():
        rounds = [{"throughput_rps": FIGURES["rows"](w, load), "p50_ms": FIGURES["p50"](w, load),
                   "p99_ms": FIGURES["p99"](w, load), "server_cpu_ms": FIGURES["cpu"](w, load), "errors": w.errors}
                  for w in cell.windows]
        series.setdefault(f"{load.model}/{load.protocol}/{server}", []).append(
            {"level": load.level, **{k: float(np.mean([r[k] for r in rounds])) if rounds else float("nan")
                                     for k in ("throughput_rps", "p50_ms", "p99_ms")},
             "errors": sum(r["errors"] for r in rounds), "rounds": rounds})
    return {"kind": "benchmark", "benchmark": benchmark,
            "series": [{"label": label, "levels": levels} for label, levels in series.items()]}


def write_json(path: Optional[Path], benchmark: str, cells: Cells) -> None:
    """``to_json`` into ``path`` (nothing when None)."""
    if path is not None:
        path.write_text(json.dumps(to_json(benchmark, cells), indent=2))
        print(f"wrote {path}")


def add_arguments(parser: argparse.ArgumentParser, *, rounds: int, duration: float,
                  resnet50_duration: Optional[float] = None, warmup: float = 1.0) -> None:
    """The flags every benchmark shares: rounds, the window's lengths and ``--json``."""
    parser.add_argument("--rounds", type=int, default=rounds,
                        help=f"interleaved rounds (ratios: median of the rounds' ratios; default: {rounds})")
    parser.add_argument("--warmup", type=float, default=warmup, help="seconds of load before each window")
    parser.add_argument("--duration", type=float, default=duration,
                        help=f"seconds measured per window (default: {duration:g})")
    if resnet50_duration is not None:
        parser.add_argument("--resnet50-duration", type=float, default=resnet50_duration,
                            help="seconds measured per resnet50 window (a batch takes seconds on CPU; "
                                 f"default: {resnet50_duration:g})")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT",
                        help="also write every cell to OUT in `python -m loadtest compare`'s shape")
