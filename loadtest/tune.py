"""Batching tuner: the most throughput within a p99 budget (beyond what TF Serving ships).

Searches ``max_batch_size``, ``batch_timeout_micros``, ``num_batch_threads``
and ``max_enqueued_batches`` by coordinate descent over a grid, starting from
a baseline config (the stack's ``serving/batching.cpu.config`` by default):
each coordinate steps to its grid neighbours and keeps walking while the
score improves by more than ``min_gain``; every candidate is measured once
(cached) and the number of trials is bounded.

A trial restarts the server with the candidate ``BatchingParameters`` (the
embedded server, or TF Serving through the docker SDK with ``--docker``) and
runs a closed-loop concurrency sweep; its score is the highest throughput of
any level whose p99 is within the budget and that had no errors.

At the end the baseline and the winner are measured again in ``final_rounds``
interleaved rounds (A, B, A, B), so the reported comparison comes from one
run under the same conditions and drift on a shared machine hits both alike. The
winner is written as ``batching.config`` (the measured table as comments)
with ``tune.json`` and ``tune.csv`` beside it.
"""
from __future__ import annotations

import argparse
import csv
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from loadtest.payloads import Target, build_payload
from loadtest.sweep import LevelResult, SweepSettings, sweep_levels

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
    """One measured candidate."""

    index: int
    params: dict[str, int]
    score_rps: float
    best_level: Optional[float]
    p99_at_best_ms: Optional[float]
    levels: list[LevelResult] = field(default_factory=list)
    error: Optional[str] = None
    note: Optional[str] = None
    seconds: float = 0.0


def score_levels(levels: Sequence[LevelResult], budget_ms: float, max_error_ratio: float = 0.0
                 ) -> tuple[float, Optional[LevelResult]]:
    """The highest throughput of a level within the p99 budget and the error limit (0 if none)."""
    ok = [r for r in levels
          if r.p99_ms <= budget_ms and r.requests and r.errors / r.requests <= max_error_ratio]
    best = max(ok, key=lambda r: r.throughput_rps, default=None)
    return (best.throughput_rps if best else 0.0), best


def coordinate_descent(start: dict[str, int], grid: dict[str, Sequence[int]],
                       measure: Callable[[dict[str, int]], float], *, max_trials: int = 12,
                       min_gain: float = 0.03) -> tuple[dict[str, int], dict[Candidate, float]]:
    """Coordinate descent on ``grid`` from ``start``; returns the best point and every score measured.

    ``measure`` is called at most ``max_trials`` times (points are cached).
    A move is accepted only when it beats the best by more than ``min_gain``
    (relative), so measurement noise does not wander the search.
    """
    grid = {k: tuple(sorted(set(grid[k]) | {start[k]})) for k in KNOBS}
    scores: dict[Candidate, float] = {}

    def score(point: dict[str, int]) -> Optional[float]:
        key = _candidate(point)
        if key not in scores:
            if len(scores) >= max_trials:
                return None
            scores[key] = measure(point)
        return scores[key]

    best = dict(start)
    best_score = score(best) or 0.0
    improved = True
    while improved and len(scores) < max_trials:
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


def candidate_proto(params: dict[str, int], baseline: Any = None):
    """A ``BatchingParameters`` proto: ``baseline``'s other fields with ``params`` applied.

    ``allowed_batch_sizes`` from the baseline are cut at the new ``max_batch_size``
    and closed with it (TF Serving requires the list to end at ``max_batch_size``).
    """
    from serving.config.protos import batching_parameters_class

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


def params_of(proto: Any) -> dict[str, int]:
    """The four knobs of a ``BatchingParameters`` (TF Serving's defaults where unset, for 2+ cores)."""
    import os

    defaults = {"num_batch_threads": os.cpu_count() or 1, "max_batch_size": 1000,
                "batch_timeout_micros": 0, "max_enqueued_batches": 10}
    return {k: int(getattr(proto, k).value) if proto.HasField(k) else defaults[k] for k in KNOBS}


def write_config(path: Path, proto: Any, header: Sequence[str]) -> Path:
    """Write ``proto`` as text, with ``header`` lines as ``#`` comments above it."""
    from google.protobuf import text_format

    comments = "".join(f"# {line}".rstrip() + "\n" for line in header)
    path.write_text(comments + "\n" + text_format.MessageToString(proto))
    return path


# ---------------------------------------------------------------- CLI

def add_arguments(parser: argparse.ArgumentParser, add_target: Callable[[argparse.ArgumentParser], None]) -> None:
    """The ``tune`` subcommand's flags."""
    add_target(parser)
    parser.add_argument("--p99-budget-ms", type=float, required=True, help="p99 latency budget (ms)")
    parser.add_argument("--baseline-config", type=Path, default=Path("serving/batching.cpu.config"),
                        help="config to start from and to beat (default serving/batching.cpu.config)")
    parser.add_argument("--protocol", choices=("grpc", "rest"), default="grpc")
    parser.add_argument("--concurrency", default="1,2,4,8,16,32", help="levels of each trial's sweep")
    parser.add_argument("--max-trials", type=int, default=12, help="bound on candidates measured (default 12)")
    parser.add_argument("--min-gain", type=float, default=0.03, help="relative gain needed to move (default 0.03)")
    parser.add_argument("--final-rounds", type=int, default=2,
                        help="interleaved baseline/tuned re-measurements at the end (default 2)")
    parser.add_argument("--max-error-ratio", type=float, default=0.0, help="errors allowed at a scored level")
    parser.add_argument("--window", type=float, default=1.0, help="measurement window, s (default 1)")
    parser.add_argument("--max-level-time", type=float, default=10.0, help="max seconds per level (default 10)")
    parser.add_argument("--grid", default=None,
                        help='JSON overriding grid values, e.g. \'{"max_batch_size": [4, 8, 16]}\'')
    parser.add_argument("--server-flag", action="append", default=[], help="extra TF Serving flag (repeatable)")
    parser.add_argument("--docker", action="store_true",
                        help="restart real TF Serving through the docker SDK (needs an engine; not run here)")
    parser.add_argument("--out", type=Path, default=Path("out/tune"), help="output directory")
    parser.set_defaults(func=run_tune)


class _Bench:
    """Measures candidates: restart the server with the config, sweep, score."""

    def __init__(self, args, target: Target, baseline: Any) -> None:
        self.args, self.target, self.baseline = args, target, baseline
        self.payload = build_payload(target)
        self.settings = SweepSettings(levels=tuple(int(x) for x in args.concurrency.split(",")),
                                      window_s=args.window, stable_windows=3, stability_pct=10.0,
                                      max_level_s=args.max_level_time, warmup_s=0.5,
                                      latency_threshold_ms=args.p99_budget_ms)
        self.trials: list[Trial] = []

    def measure(self, params: dict[str, int], label: str = "") -> Trial:
        from loadtest.generator import transport_for
        from loadtest.servers import DockerServer, EmbeddedServer

        index = len(self.trials)
        started = time.monotonic()
        kind = DockerServer if self.args.docker else EmbeddedServer
        server = kind({self.target.name: Path(self.target.model_repo) / self.target.name},
                      batching=candidate_proto(params, self.baseline), extra_flags=self.args.server_flag,
                      workdir=self.args.out / "trials" / f"{index:02d}")
        trial = Trial(index, dict(params), 0.0, None, None)
        try:
            with server:
                address = server.grpc_target if self.args.protocol == "grpc" else server.rest_url
                transport = transport_for(self.args.protocol, address, self.payload)
                trial.levels = sweep_levels(transport, self.settings, metrics_url=server.metrics_url,
                                            model_name=self.target.name,
                                            server_pid=getattr(getattr(server, "proc", None), "pid", None))
        except Exception as error:  # a candidate the server rejects scores 0 and the search goes on
            trial.error = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        trial.score_rps, best = score_levels(trial.levels, self.args.p99_budget_ms, self.args.max_error_ratio)
        if best is not None:
            trial.best_level, trial.p99_at_best_ms = best.level, best.p99_ms
        elif trial.levels:
            low = trial.levels[0]
            trial.note = (f"no level within budget: lowest c={low.level:g} had p99 {low.p99_ms:.1f} ms, "
                          f"{low.errors} errors")
        trial.seconds = time.monotonic() - started
        self.trials.append(trial)
        print(f"trial {index:2d} {label:9s} {_fmt(params)} -> {trial.score_rps:8.1f} req/s"
              + (f" (c={trial.best_level:g}, p99 {trial.p99_at_best_ms:.2f} ms)" if best else "")
              + (f" ERROR {trial.error}" if trial.error else "") + (f" ({trial.note})" if trial.note else ""),
              flush=True)
        return trial


def warmup_batch_floor(target: Target) -> int:
    """The largest batch the model's warmup requests send (from its manifest), 0 if unknown.

    A ``max_batch_size`` below it fails the load ("Task size N is larger than
    maximum input batch size M"), so the search never goes there.
    """
    from exporter.manifest import load_manifest

    sizes = load_manifest(target.version_dir()).warmup.get("batch_sizes") or []
    return max(int(s) for s in sizes) if sizes else 0


def _fmt(params: dict[str, int]) -> str:
    return " ".join(f"{k}={params[k]}" for k in KNOBS)


def _grid(args) -> dict[str, tuple[int, ...]]:
    grid = dict(DEFAULT_GRID)
    if args.grid:
        for knob, values in json.loads(args.grid).items():
            if knob not in KNOBS:
                raise SystemExit(f"--grid: unknown knob {knob!r}; knobs are {KNOBS}")
            grid[knob] = tuple(int(v) for v in values)
    return grid


def run_tune(args) -> int:
    """The ``tune`` subcommand."""
    from serving.config import load_batching_parameters

    args.out.mkdir(parents=True, exist_ok=True)
    target = Target(model=args.model, variant=args.variant.split(",")[0], signature=args.signature,
                    batch_size=args.batch_size, model_repo=args.model_repo)
    baseline = load_batching_parameters(args.baseline_config)
    start, grid, floor = params_of(baseline), _grid(args), warmup_batch_floor(target)
    if floor:
        grid["max_batch_size"] = tuple(v for v in grid["max_batch_size"] if v >= floor) or (floor,)
        if start["max_batch_size"] < floor:
            print(f"note: baseline max_batch_size {start['max_batch_size']} is below the largest warmup batch "
                  f"({floor}) of {target.name}; TF Serving would fail the load, so the baseline runs with "
                  f"max_batch_size {floor}", flush=True)
            start["max_batch_size"] = floor
    bench = _Bench(args, target, baseline)
    print(f"tuning {target.name} over {args.protocol}: p99 budget {args.p99_budget_ms} ms, "
          f"at most {args.max_trials} trials, baseline {args.baseline_config}: {_fmt(start)}", flush=True)
    best, _ = coordinate_descent(start, grid, lambda p: bench.measure(p, "search").score_rps,
                                 max_trials=args.max_trials, min_gain=args.min_gain)
    finals: dict[str, list[Trial]] = {"baseline": [], "tuned": []}
    for _ in range(args.final_rounds):  # interleaved A/B, so drift on a shared machine hits both alike
        finals["baseline"].append(bench.measure(start, "baseline"))
        if best != start:
            finals["tuned"].append(bench.measure(best, "tuned"))
    finals["tuned"] = finals["tuned"] or finals["baseline"]
    return _report(args, target, baseline, start, best, bench.trials, finals)


def _report(args, target: Target, baseline: Any, start: dict[str, int], best: dict[str, int],
            trials: Sequence[Trial], finals: dict[str, list[Trial]]) -> int:
    base_rps = [t.score_rps for t in finals["baseline"]]
    tuned_rps = [t.score_rps for t in finals["tuned"]]
    base_mean, tuned_mean = sum(base_rps) / len(base_rps), sum(tuned_rps) / len(tuned_rps)
    gain = tuned_mean / base_mean if base_mean else float("inf")
    chosen = best if gain > 1 + args.min_gain else start  # the search's winner must hold up when re-measured
    summary = {"model": target.name, "protocol": args.protocol, "p99_budget_ms": args.p99_budget_ms,
               "baseline_config": str(args.baseline_config), "baseline": start, "best": best,
               "final": {"baseline_rps": base_rps, "tuned_rps": tuned_rps, "baseline_mean_rps": base_mean,
                         "tuned_mean_rps": tuned_mean, "ratio": gain,
                         "tuned_won_every_round": all(t > b for t, b in zip(tuned_rps, base_rps))},
               "chosen": chosen, "kept_baseline": chosen == start,
               "trials": [asdict(t) for t in trials]}
    (args.out / "tune.json").write_text(json.dumps(summary, indent=2))
    with open(args.out / "tune.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["trial", *KNOBS, "score_rps", "best_concurrency", "p99_at_best_ms", "error", "note"])
        for t in trials:
            writer.writerow([t.index, *(t.params[k] for k in KNOBS), f"{t.score_rps:.1f}", t.best_level,
                             t.p99_at_best_ms and f"{t.p99_at_best_ms:.2f}", t.error or "", t.note or ""])
    header = [f"Tuned by `python -m loadtest tune` for {target.name} over {args.protocol} on "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
              f"Objective: most throughput with p99 <= {args.p99_budget_ms} ms and no errors "
              f"(closed-loop concurrency {args.concurrency}).",
              f"Re-measured in {len(base_rps)} interleaved rounds: baseline ({args.baseline_config}) "
              f"{', '.join(f'{v:.1f}' for v in base_rps)} req/s (mean {base_mean:.1f}); this config "
              f"{', '.join(f'{v:.1f}' for v in tuned_rps)} req/s (mean {tuned_mean:.1f}, x{gain:.2f}).",
              "Measured table (trial: knobs -> req/s within budget):",
              *(f"  {t.index:2d}: {_fmt(t.params)} -> {t.score_rps:.1f}"
                + (f" (c={t.best_level:g}, p99 {t.p99_at_best_ms:.2f} ms)" if t.best_level is not None else "")
                + (f" [{t.error or t.note}]" if t.error or t.note else "") for t in trials),
              ("The search's winner did not beat the baseline by more than --min-gain when re-measured, so this "
               "file keeps the baseline's values." if chosen == start and best != start else
               "This file holds the winner's values."),
              "Full table: tune.json / tune.csv beside this file."]
    path = write_config(args.out / "batching.config", candidate_proto(chosen, baseline), header)
    print(f"baseline {_fmt(start)}: {base_rps} mean {base_mean:.1f} req/s; tuned {_fmt(best)}: {tuned_rps} "
          f"mean {tuned_mean:.1f} req/s (x{gain:.2f}) at p99 <= {args.p99_budget_ms} ms")
    if chosen == start and best != start:
        print("the search's winner did not hold up when re-measured: batching.config keeps the baseline")
    print(f"wrote {path}, {args.out / 'tune.json'}, {args.out / 'tune.csv'}")
    return 0
