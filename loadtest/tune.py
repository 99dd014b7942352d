"""Batching tuner: the most throughput within a p99 budget (beyond what TF Serving ships).

Searches ``max_batch_size``, ``batch_timeout_micros``, ``num_batch_threads``
and ``max_enqueued_batches`` by coordinate descent over a grid, starting from
a baseline config (the stack's ``serving/batching.cpu.config`` by default):
each coordinate steps to its grid neighbours and keeps walking while the
score improves by more than ``min_gain``; the number of candidates measured
is bounded.

Every measurement is paired. A server with the baseline config stays up for
the whole run; each candidate gets its own server (the embedded server, or TF
Serving through the docker SDK with ``--docker``), and the two are swept in
turn, ``rounds`` times (baseline, candidate, baseline, candidate, ...). A
sweep's score is the highest throughput of any level whose p99 is within the
budget and that had no errors; a candidate's score is the mean of its sweeps
over the mean of the baseline's sweeps in the same rounds. Load on a shared
machine changes by tens of percent from one minute to the next; pairing makes
both sides of every comparison see the same changes, so the search compares
configs, not moments.

At the end the winner is restarted and compared with the baseline again in
``final_rounds`` fresh paired rounds; it is kept only if it still beats the
baseline by more than ``min_gain``. The result is written as
``batching.config`` (the measured table as comments) with ``tune.json`` and
``tune.csv`` beside it.

The model needs no manifest: the payload comes from ``--input-data``, the
manifest, or the metadata of the baseline server the tuner starts
(``loadtest.payloads``), and is built once for every sweep.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from google.protobuf import text_format
from google.protobuf.message import Message

from exporter.manifest import load_manifest
from loadtest import REPO_ROOT
from loadtest.generator import transport_for
from loadtest.options import add_target_arguments, targets_from_args
from loadtest.payloads import Payload, Target, build_payload
from loadtest.servers import RunningServer, start_server
from loadtest.sweep import LevelResult, SweepSettings, sweep_levels
from serving.config import load_batching_parameters
from serving.config.protos import batching_parameters_class

__all__ = [
    "KNOBS",
    "DEFAULT_GRID",
    "Candidate",
    "Trial",
    "coordinate_descent",
    "score_levels",
    "candidate_proto",
    "write_config",
    "add_arguments",
    "run_tune",
    "warmup_batch_floor",
]

KNOBS = ("num_batch_threads", "max_batch_size", "batch_timeout_micros", "max_enqueued_batches")
DEFAULT_GRID: dict[str, tuple[int, ...]] = {
    "num_batch_threads": (1, 2, 3, 4, 8),
    "max_batch_size": (1, 2, 4, 8, 16, 32, 64, 128),
    "batch_timeout_micros": (0, 250, 500, 1000, 2000, 5000, 10000),
    "max_enqueued_batches": (1, 2, 4, 8, 16, 64, 1000),
}

Candidate = tuple[tuple[str, int], ...]  # sorted (knob, value) pairs: hashable, printable


def _candidate(values: dict[str, int]) -> Candidate:
    return tuple((k, int(values[k])) for k in KNOBS)


@dataclass
class Trial:
    """One candidate compared with the baseline in paired rounds (req/s within the budget)."""

    index: int
    params: dict[str, int]
    score_rps: float                      # the candidate's mean over its rounds
    best_level: Optional[float]           # level of the candidate's best-scoring sweep
    p99_at_best_ms: Optional[float]
    baseline_rps: float = 0.0             # the baseline's mean over the same rounds
    ratio: float = 0.0                    # score_rps / baseline_rps
    rounds: list[dict[str, float]] = field(default_factory=list)
    levels: list[LevelResult] = field(default_factory=list)   # the candidate's last sweep
    error: Optional[str] = None
    note: Optional[str] = None
    seconds: float = 0.0
    label: str = "search"


def score_levels(levels: Sequence[LevelResult], budget_ms: float, max_error_ratio: float = 0.0
                 ) -> tuple[float, Optional[LevelResult]]:
    """The highest throughput of a level within the p99 budget and the error limit (0 if none)."""
    ok = [r for r in levels
          if r.p99_ms <= budget_ms and r.requests and r.errors / r.requests <= max_error_ratio]
    best = max(ok, key=lambda r: r.throughput_rps, default=None)
    return (best.throughput_rps if best else 0.0), best


def coordinate_descent(start: dict[str, int], grid: dict[str, Sequence[int]],
                       measure: Callable[[dict[str, int]], float], *, max_trials: int = 12,
                       min_gain: float = 0.03, start_score: Optional[float] = None
                       ) -> tuple[dict[str, int], dict[Candidate, float]]:
    """Coordinate descent on ``grid`` from ``start``; returns the best point and every score known.

    ``measure`` is called at most ``max_trials`` times (points are cached).
    A known ``start_score`` is used as is (``start`` is not measured). A move
    is accepted only when it beats the best by more than ``min_gain``
    (relative), so measurement noise does not wander the search.
    """
    grid = {k: tuple(sorted(set(grid[k]) | {start[k]})) for k in KNOBS}
    scores: dict[Candidate, float] = {}
    if start_score is not None:
        scores[_candidate(start)] = start_score
    measured = [0]

    def score(point: dict[str, int]) -> Optional[float]:
        key = _candidate(point)
        if key not in scores:
            if measured[0] >= max_trials:
                return None
            measured[0] += 1
            scores[key] = measure(point)
        return scores[key]

    best = dict(start)
    best_score = score(best) or 0.0
    improved = True
    while improved and measured[0] < max_trials:
        improved = False
        for knob in KNOBS:
            values = grid[knob]
            for direction in (+1, -1):
                index = values.index(best[knob]) + direction
                while 0 <= index < len(values):
                    point = {**best, knob: values[index]}
                    result = score(point)
                    if result is None or result <= best_score * (1 + min_gain):
                        break
                    best, best_score, improved = point, result, True
                    index += direction
    return best, scores


def candidate_proto(params: dict[str, int], baseline: Optional[Message] = None) -> Message:
    """A ``BatchingParameters`` proto: ``baseline``'s other fields with ``params`` applied.

    ``allowed_batch_sizes`` from the baseline are cut at the new ``max_batch_size``
    and closed with it (TF Serving requires the list to end at ``max_batch_size``).
    """
    proto = batching_parameters_class()()
    if baseline is not None:
        proto.CopyFrom(baseline)
    for knob, value in params.items():
        getattr(proto, knob).value = int(value)
    if proto.allowed_batch_sizes:
        sizes = [s for s in proto.allowed_batch_sizes if s < params["max_batch_size"]]
        del proto.allowed_batch_sizes[:]
        proto.allowed_batch_sizes.extend([*sizes, params["max_batch_size"]])
    return proto


def params_of(proto: Message) -> dict[str, int]:
    """The four knobs of a ``BatchingParameters`` (TF Serving's defaults where unset, for 2+ cores)."""
    defaults = {"num_batch_threads": os.cpu_count() or 1, "max_batch_size": 1000,
                "batch_timeout_micros": 0, "max_enqueued_batches": 10}
    return {k: int(getattr(proto, k).value) if proto.HasField(k) else defaults[k] for k in KNOBS}


def write_config(path: Path, proto: Message, header: Sequence[str]) -> Path:
    """Write ``proto`` as text, with ``header`` lines as ``#`` comments above it."""
    comments = "".join(f"# {line}".rstrip() + "\n" for line in header)
    path.write_text(comments + "\n" + text_format.MessageToString(proto))
    return path


# ---------------------------------------------------------------- CLI

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``tune`` subcommand's flags (it starts its own servers: no --grpc/--rest)."""
    add_target_arguments(parser)
    parser.add_argument("--p99-budget-ms", type=float, required=True, help="p99 latency budget (ms)")
    parser.add_argument("--baseline-config", type=Path, default=REPO_ROOT / "serving" / "batching.cpu.config",
                        help="config to start from and to beat (default <checkout>/serving/batching.cpu.config)")
    parser.add_argument("--protocol", choices=("grpc", "rest"), default="grpc",
                        help="the API each trial's sweep loads (default grpc)")
    parser.add_argument("--concurrency", default="1,2,4,8,16,32", help="levels of each trial's sweep")
    parser.add_argument("--max-trials", type=int, default=10,
                        help="bound on candidates measured, the baseline not counted (default 10)")
    parser.add_argument("--min-gain", type=float, default=0.05, help="relative gain needed to move (default 0.05)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="paired baseline/candidate sweeps per candidate (default 2)")
    parser.add_argument("--final-rounds", type=int, default=3,
                        help="fresh paired baseline/winner sweeps at the end (default 3)")
    parser.add_argument("--skip-off", action="store_true",
                        help="do not try serving without batching as a candidate")
    parser.add_argument("--max-error-ratio", type=float, default=0.0, help="errors allowed at a scored level")
    parser.add_argument("--window", type=float, default=1.0, help="measurement window, s (default 1)")
    parser.add_argument("--max-level-time", type=float, default=10.0, help="max seconds per level (default 10)")
    parser.add_argument("--grid", default=None,
                        help='JSON overriding grid values, e.g. \'{"max_batch_size": [4, 8, 16]}\'')
    parser.add_argument("--server-flag", action="append", default=[], help="extra TF Serving flag (repeatable)")
    parser.add_argument("--docker", action="store_true",
                        help="restart real TF Serving through the docker SDK (needs an engine; not run here)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "tune",
                        help="output directory for reports (default <checkout>/out/tune)")
    parser.set_defaults(func=run_tune)


class _Bench:
    """Paired measurements: a baseline server kept up, and one server per candidate."""

    def __init__(self, args: argparse.Namespace, target: Target, baseline: Message, start: dict[str, int]) -> None:
        self.args, self.target, self.baseline, self.start = args, target, baseline, start
        self.payload: Optional[Payload] = None  # built against the baseline server on entry
        self.settings = SweepSettings(levels=tuple(int(x) for x in args.concurrency.split(",")),
                                      window_s=args.window, stable_windows=3, stability_pct=10.0,
                                      max_level_s=args.max_level_time, warmup_s=0.5,
                                      latency_threshold_ms=args.p99_budget_ms)
        self.trials: list[Trial] = []
        self._baseline_server: Optional[RunningServer] = None

    def __enter__(self) -> "_Bench":
        self._baseline_server = self._server(self.start, "baseline").start()
        try:
            self.payload = build_payload(self.target, grpc=self._baseline_server.grpc_target)
        except Exception:
            self.__exit__()
            raise
        print(f"payload {self.payload.label}: {self.payload.source}", flush=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._baseline_server is not None:
            self._baseline_server.stop()
            self._baseline_server = None

    def _server(self, params: Optional[dict[str, int]], directory: str) -> RunningServer:
        """A server with ``params`` as its ``BatchingParameters``; None: without batching."""
        batching = None if params is None else candidate_proto(params, self.baseline)
        return start_server({self.target.name: Path(self.target.model_repo) / self.target.name},
                            workdir=self.args.out / "trials" / directory, batching=batching,
                            extra_flags=self.args.server_flag, docker_engine=self.args.docker)

    def _sweep(self, server: RunningServer) -> tuple[float, Optional[LevelResult], list[LevelResult]]:
        assert self.payload is not None, "sweeps run inside the bench's with block"
        address = server.grpc_target if self.args.protocol == "grpc" else server.rest_url
        levels = sweep_levels(transport_for(self.args.protocol, address, self.payload), self.settings,
                              metrics_url=server.metrics_url, model_name=self.target.name, server_pid=server.pid)
        score, best = score_levels(levels, self.args.p99_budget_ms, self.args.max_error_ratio)
        return score, best, levels

    def compare(self, params: Optional[dict[str, int]], rounds: int, label: str = "search") -> Trial:
        """Start ``params``' server (None: no batching) and sweep baseline and candidate in turn."""
        index = len(self.trials)
        started = time.monotonic()
        trial = Trial(index, dict(params or {}), 0.0, None, None, label=label)
        best_seen: Optional[LevelResult] = None
        try:
            with self._server(params, f"{index:02d}") as server:
                for _ in range(rounds):
                    base_score, _, _ = self._sweep(self._baseline_server)
                    score, best, trial.levels = self._sweep(server)
                    trial.rounds.append({"baseline_rps": base_score, "candidate_rps": score})
                    if best is not None and (best_seen is None or best.throughput_rps > best_seen.throughput_rps):
                        best_seen = best
        except Exception as error:  # a candidate the server rejects scores 0 and the search goes on
            trial.error = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        if trial.rounds:
            trial.baseline_rps = sum(r["baseline_rps"] for r in trial.rounds) / len(trial.rounds)
            trial.score_rps = sum(r["candidate_rps"] for r in trial.rounds) / len(trial.rounds)
            trial.ratio = trial.score_rps / trial.baseline_rps if trial.baseline_rps else 0.0
        if best_seen is not None:
            trial.best_level, trial.p99_at_best_ms = best_seen.level, best_seen.p99_ms
        elif trial.levels:
            low = trial.levels[0]
            trial.note = (f"no level within budget: lowest c={low.level:g} had p99 {low.p99_ms:.1f} ms, "
                          f"{low.errors} errors")
        trial.seconds = time.monotonic() - started
        self.trials.append(trial)
        print(f"trial {index:2d} {label:7s} {_fmt(params)} -> {trial.score_rps:7.1f} req/s vs baseline "
              f"{trial.baseline_rps:7.1f} (x{trial.ratio:.2f}; rounds "
              + ", ".join(f"{r['candidate_rps']:.0f}/{r['baseline_rps']:.0f}" for r in trial.rounds) + ")"
              + (f" ERROR {trial.error}" if trial.error else "") + (f" ({trial.note})" if trial.note else ""),
              flush=True)
        return trial


def warmup_batch_floor(target: Target) -> int:
    """The largest batch the model's warmup requests send (from its manifest), 0 if unknown (no manifest).

    A ``max_batch_size`` below it fails the load ("Task size N is larger than
    maximum input batch size M"), so the search never goes there.
    """
    manifest_dir = target.manifest_dir()
    if manifest_dir is None:
        return 0
    sizes = load_manifest(manifest_dir).warmup.get("batch_sizes") or []
    return max(int(s) for s in sizes) if sizes else 0


def _fmt(params: Optional[dict[str, int]]) -> str:
    if not params:
        return "batching off"
    return " ".join(f"{k}={params[k]}" for k in KNOBS)


def _grid(args: argparse.Namespace) -> dict[str, tuple[int, ...]]:
    grid = dict(DEFAULT_GRID)
    if args.grid:
        for knob, values in json.loads(args.grid).items():
            if knob not in KNOBS:
                raise SystemExit(f"--grid: unknown knob {knob!r}; knobs are {KNOBS}")
            grid[knob] = tuple(int(v) for v in values)
    return grid


def run_tune(args: argparse.Namespace) -> int:
    """The ``tune`` subcommand."""
    args.out.mkdir(parents=True, exist_ok=True)
    target = targets_from_args(args)[0]
    baseline = load_batching_parameters(args.baseline_config)
    start, grid, floor = params_of(baseline), _grid(args), warmup_batch_floor(target)
    if floor:
        grid["max_batch_size"] = tuple(v for v in grid["max_batch_size"] if v >= floor) or (floor,)
        if start["max_batch_size"] < floor:
            print(f"note: baseline max_batch_size {start['max_batch_size']} is below the largest warmup batch "
                  f"({floor}) of {target.name}; TF Serving would fail the load, so the baseline runs with "
                  f"max_batch_size {floor}", flush=True)
            start["max_batch_size"] = floor
    print(f"tuning {target.name} over {args.protocol}: p99 budget {args.p99_budget_ms} ms, "
          f"at most {args.max_trials} candidates, {args.rounds} paired rounds each, "
          f"baseline {args.baseline_config}: {_fmt(start)}", flush=True)
    with _Bench(args, target, baseline, start) as bench:
        best, scores = coordinate_descent(start, grid, lambda p: bench.compare(p, args.rounds).ratio,
                                          max_trials=args.max_trials, min_gain=args.min_gain, start_score=1.0)
        # Serving without batching is a candidate too (Triton's Model Analyzer searches dynamic
        # batching as a setting as well): on a small CPU host it can beat every batching config.
        off = None if args.skip_off else bench.compare(None, args.rounds, "off")
        finals: dict[str, Trial] = {}
        if best != start:
            finals["tuned"] = bench.compare(best, args.final_rounds, "final")
        if off is not None and off.ratio > max(scores[_candidate(best)], 1.0) * (1 + args.min_gain):
            finals["off"] = bench.compare(None, args.final_rounds, "final")
        if not finals:  # nothing beat the baseline: the baseline against itself shows the noise floor
            finals["tuned"] = bench.compare(start, args.final_rounds, "final")
    assert bench.payload is not None
    return _report(args, target, bench.payload, baseline, start, best, bench.trials, finals)


def _report(args: argparse.Namespace, target: Target, payload: Payload, baseline: Message, start: dict[str, int],
            best: dict[str, int], trials: Sequence[Trial], finals: dict[str, Trial]) -> int:
    tuned, off = finals.get("tuned"), finals.get("off")
    holds = tuned is not None and best != start and tuned.ratio > 1 + args.min_gain
    chosen = best if holds else start  # the search's winner must hold up in fresh rounds
    without_batching = off is not None and off.ratio > (tuned.ratio if holds else 1.0) * (1 + args.min_gain)
    summary = {"model": target.name, "protocol": args.protocol, "p99_budget_ms": args.p99_budget_ms,
               "payload": payload.describe(),
               "baseline_config": str(args.baseline_config), "baseline": start, "best": best,
               "final": {name: _final_summary(trial) for name, trial in finals.items()},
               "chosen": chosen, "kept_baseline": chosen == start, "enable_batching": not without_batching,
               "trials": [asdict(t) for t in trials]}
    (args.out / "tune.json").write_text(json.dumps(summary, indent=2))
    with open(args.out / "tune.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["trial", "label", *KNOBS, "score_rps", "baseline_rps", "ratio", "rounds",
                         "best_concurrency", "p99_at_best_ms", "error", "note"])
        for t in trials:
            writer.writerow([t.index, t.label, *(t.params.get(k, "") for k in KNOBS), f"{t.score_rps:.1f}",
                             f"{t.baseline_rps:.1f}", f"{t.ratio:.3f}", len(t.rounds), t.best_level,
                             t.p99_at_best_ms and f"{t.p99_at_best_ms:.2f}", t.error or "", t.note or ""])
    verdict = ("This file holds the search's winner, which held up in the final rounds." if holds else
               "No batching config beat the baseline by more than --min-gain "
               + ("in the search" if best == start else "in fresh paired rounds")
               + "; this file keeps the baseline's values.")
    if without_batching:
        verdict += (f" Serving WITHOUT batching beat it: x{off.ratio:.2f} the baseline in the final rounds. "
                    "On this host, drop --enable_batching (this file is for when batching stays on).")
    header = [f"Tuned by `python -m loadtest tune` for {target.name} over {args.protocol} on "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
              f"Objective: most throughput with p99 <= {args.p99_budget_ms} ms and no errors "
              f"(closed-loop concurrency {args.concurrency}); each candidate swept in turn with the baseline "
              f"({args.baseline_config}), {args.rounds} paired rounds.",
              *(_final_line(t) for t in finals.values()),
              "Measured table (trial: knobs -> candidate / baseline req/s within budget, same rounds):",
              *(f"  {t.index:2d} {t.label}: {_fmt(t.params)} -> {t.score_rps:.1f} / {t.baseline_rps:.1f} "
                f"(x{t.ratio:.2f})"
                + (f" best c={t.best_level:g}, p99 {t.p99_at_best_ms:.2f} ms" if t.best_level is not None else "")
                + (f" [{t.error or t.note}]" if t.error or t.note else "") for t in trials),
              verdict,
              "Full table: tune.json / tune.csv beside this file."]
    path = write_config(args.out / "batching.config", candidate_proto(chosen, baseline), header)
    for trial in finals.values():
        print(_final_line(trial))
    print(verdict)
    print(f"wrote {path}, {args.out / 'tune.json'}, {args.out / 'tune.csv'}")
    return 0


def _final_line(trial: Trial) -> str:
    candidate = ", ".join(f"{r['candidate_rps']:.1f}" for r in trial.rounds)
    base = ", ".join(f"{r['baseline_rps']:.1f}" for r in trial.rounds)
    return (f"Final check of {_fmt(trial.params)}, {len(trial.rounds)} fresh paired rounds: {candidate} req/s "
            f"(mean {trial.score_rps:.1f}) against the baseline's {base} (mean {trial.baseline_rps:.1f}): "
            f"x{trial.ratio:.2f}.")


def _final_summary(trial: Trial) -> dict[str, Any]:
    candidate = [r["candidate_rps"] for r in trial.rounds]
    base = [r["baseline_rps"] for r in trial.rounds]
    return {"params": trial.params or "batching off", "baseline_rps": base, "candidate_rps": candidate,
            "baseline_mean_rps": trial.baseline_rps, "candidate_mean_rps": trial.score_rps, "ratio": trial.ratio,
            "candidate_won_every_round": bool(candidate) and all(c > b for c, b in zip(candidate, base))}
