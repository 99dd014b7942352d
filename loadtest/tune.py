"""Serving-config tuner: threads, model variant (XLA, TF-TRT), batching and GPU memory, within a p99 budget.

The search space is ``loadtest.space``: each dimension a real
``tensorflow_model_server`` flag or ``BatchingParameters`` field, applied on
the command line of the server each trial starts (the embedded server, or TF
Serving in Docker with ``--docker``: the compose stack's image, which must be
present locally; it is never pulled, and ``--docker`` stops at once with the
reason where it is absent or no engine answers). Dimensions the backend
cannot apply (GPU memory on a CPU host, a TensorRT variant that was never
exported) are skipped and the report says why.

The default is TF Serving's: threads auto, the fp32 model, no XLA, no
batching. Each trial starts a fresh server with the default and one with the
candidate (neither has served longer), and the two are swept in turn, ``rounds``
times (default then candidate, candidate then default, ...): a busy minute on a
shared machine hits both sides. A sweep gives two numbers: the highest
throughput of any concurrency level whose p99 is within the budget (no
errors), and the p50 latency at concurrency 1. A candidate scores the mean of
its rounds over the default's mean in the same rounds (``--objective``
throughput, or latency: default p50 over candidate p50); its spread is half
the range of the per-round ratios, and the search scores it by the ratio
minus the spread, so a gain the rounds disagree on is not a gain.

The search is coordinate descent over the dimensions in ``space.DIMENSIONS``
order: thread counts, variants and batching on/off try every value, the
batching parameters walk their grid while the score improves. A move needs a
gain above ``--min-gain`` over the best so far. At the end the winner is
restarted and compared with the default again in ``final_rounds`` fresh paired
rounds; it is recommended only if it still wins by more than ``--min-gain``
beyond the spread of those rounds.

Outputs (``loadtest.tune_report``): ``tune.md`` (the table: setting, default,
tuned, p50 before → after, throughput gain ± spread; then the combined best
against the default; then the flags and ``batching.config`` to paste),
``tune.json``, ``tune.png``, ``tune.csv`` and ``batching.config`` when batching
is recommended.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Collection, Mapping, Optional, Sequence

from google.protobuf import text_format
from google.protobuf.message import Message

from exporter.manifest import load_manifest
from loadtest import space
from loadtest.documents import CompactLevel, RoundMeasure, TuneRound
from loadtest.driver import transport_for
from loadtest.options import add_target_arguments, targets_from_args
from loadtest.payloads import Payload, Target, build_payload
from loadtest.preflight import check_served
from loadtest.servers import RunningServer, docker_image, start_server
from loadtest.sweep import LevelResult, SweepSettings, sweep_levels
from loadtest.tune_report import write_report
from serving.checkout import REPO_ROOT
from serving.config import load_batching_parameters

__all__ = [
    "KNOBS",
    "DEFAULT_GRID",
    "Candidate",
    "Trial",
    "coordinate_descent",
    "score_levels",
    "params_of",
    "write_config",
    "add_arguments",
    "run_tune",
    "warmup_batch_floor",
    "round_ratios",
    "spread",
]

KNOBS = ("num_batch_threads", "max_batch_size", "batch_timeout_micros", "max_enqueued_batches")
DEFAULT_GRID: dict[str, tuple[int, ...]] = {
    "num_batch_threads": (1, 2, 3, 4, 8),
    "max_batch_size": (1, 2, 4, 8, 16, 32, 64, 128),
    "batch_timeout_micros": (0, 250, 500, 1000, 2000, 5000, 10000),
    "max_enqueued_batches": (1, 2, 4, 8, 16, 64, 1000),
}

Candidate = tuple[tuple[str, space.Setting], ...]  # (dimension, value) pairs in grid order: hashable, printable

# --quick and the full run: values used where the flag is not given.
_PRESETS = {
    "quick": {"concurrency": "1,8", "window": 0.5, "max_level_time": 3.0, "rounds": 2, "final_rounds": 3,
              "max_trials": 9},
    "full": {"concurrency": "1,2,4,8,16", "window": 1.0, "max_level_time": 8.0, "rounds": 3, "final_rounds": 4,
             "max_trials": 24},
}
_MIN_DEFAULT_BUDGET_MS = 25.0  # a scheduler hiccup on a busy host must not put concurrency 1 over the budget
_EXHAUSTIVE = ("gpu_memory_fraction", "intra_op", "inter_op", "variant", "batching")


@dataclass
class Trial:
    """One candidate config compared with the default in paired rounds.

    ``ratio`` is the objective's (throughput: candidate over default req/s within
    the budget; latency: default over candidate p50 at concurrency 1), so above 1
    is better either way. ``rounds`` hold both sides' numbers, round by round.
    """

    index: int
    config: space.Config
    dimension: str = ""
    label: str = "search"
    score_rps: float = 0.0                # the candidate's mean throughput within the budget
    baseline_rps: float = 0.0             # the default's mean over the same rounds
    throughput_ratio: float = 0.0
    throughput_spread: float = 0.0        # half the range of the per-round throughput ratios
    p50_c1_ms: Optional[float] = None     # the candidate's mean p50 at concurrency 1
    baseline_p50_c1_ms: Optional[float] = None
    latency_ratio: float = 0.0            # default p50 / candidate p50 (above 1: faster)
    latency_spread: float = 0.0
    cpu_ms_per_request: Optional[float] = None           # the server's CPU per request at the top level
    baseline_cpu_ms_per_request: Optional[float] = None  # (noise-robust on a shared machine)
    ratio: float = 0.0                    # the objective's ratio
    score: float = 0.0                    # what the search compares: ratio minus the objective's spread
    best_level: Optional[float] = None
    p99_at_best_ms: Optional[float] = None
    rounds: list[TuneRound] = field(default_factory=list)
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


def _ordered(values: Sequence[space.Setting], start: space.Setting) -> tuple[space.Setting, ...]:
    """Numbers sorted (so a walk moves up or down), anything else in the given order; ``start`` included."""
    merged = list(dict.fromkeys([*values, start]))
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in merged):
        return tuple(sorted(merged))
    return tuple(merged if start in values else [start, *values])


def coordinate_descent(start: Mapping[str, space.Setting], grid: Mapping[str, Sequence[space.Setting]],
                       measure: Callable[[space.Config], float], *, max_trials: int = 12,
                       min_gain: float = 0.03, start_score: Optional[float] = None,
                       exhaustive: Collection[str] = (), normalize: Callable[[dict], dict] = dict,
                       on_dimension: Callable[[str], None] = lambda name: None
                       ) -> tuple[space.Config, dict[Candidate, float]]:
    """Coordinate descent on ``grid`` (its key order) from ``start``; the best point and every score known.

    ``measure`` is called at most ``max_trials`` times (points are cached, after
    ``normalize``: points it maps together are measured once). A known
    ``start_score`` is used as is. Along an ``exhaustive`` dimension every value
    is measured and the best taken; along any other, the walk steps to the
    neighbours and goes on while the score improves. A move is accepted only
    when it beats the best by more than ``min_gain`` (relative), so measurement
    noise does not wander the search. ``on_dimension(name)`` is called as the
    search turns to a dimension.
    """
    keys = tuple(grid)
    grid = {k: _ordered(grid[k], start[k]) for k in keys}
    scores: dict[Candidate, float] = {}

    def key_of(point: Mapping[str, space.Setting]) -> Candidate:
        point = normalize(dict(point))
        return tuple((k, point[k]) for k in keys)

    if start_score is not None:
        scores[key_of(start)] = start_score
    measured = [0]

    def score(point: space.Config) -> Optional[float]:
        key = key_of(point)
        if key not in scores:
            if measured[0] >= max_trials:
                return None
            measured[0] += 1
            scores[key] = measure(normalize(dict(point)))
        return scores[key]

    best = dict(start)
    best_score = score(best) or 0.0
    improved = True
    while improved and measured[0] < max_trials:
        improved = False
        for knob in keys:
            values = grid[knob]
            if len(values) < 2:
                continue
            on_dimension(knob)
            if knob in exhaustive:
                results = [(score({**best, knob: v}), v) for v in values if v != best[knob]]
                top = max(((s, v) for s, v in results if s is not None), default=None, key=lambda sv: sv[0])
                if top is not None and top[0] > best_score * (1 + min_gain):
                    best, best_score, improved = {**best, knob: top[1]}, top[0], True
                continue
            for direction in (+1, -1):
                index = values.index(best[knob]) + direction
                while 0 <= index < len(values):
                    point = {**best, knob: values[index]}
                    result = score(point)
                    if result is None or result <= best_score * (1 + min_gain):
                        break
                    best, best_score, improved = point, result, True
                    index += direction
    return normalize(best), scores


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


def round_ratios(rounds: Sequence[TuneRound], candidate: RoundMeasure, baseline: RoundMeasure,
                 higher_is_better: bool = True) -> list[float]:
    """Per-round ratios of ``candidate`` over ``baseline`` (inverted for lower-is-better), above 1 = better."""
    ratios = []
    for r in rounds:
        c, b = r.get(candidate), r.get(baseline)
        if c and b:
            ratios.append(c / b if higher_is_better else b / c)
    return ratios


def spread(values: Sequence[float]) -> float:
    """Half the range of ``values`` (0 for fewer than two): the ± the report prints."""
    return (max(values) - min(values)) / 2 if len(values) > 1 else 0.0


def _mean(values: Sequence[Optional[float]]) -> Optional[float]:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def warmup_batch_floor(target: Target) -> int:
    """The largest batch the model's warmup requests send (from its manifest), 0 if unknown (no manifest).

    A ``max_batch_size`` below it fails the load ("Task size N is larger than
    maximum input batch size M"), so the search never goes there.
    """
    manifest_dir = target.manifest_dir()
    if manifest_dir is None:
        return 0
    manifest = load_manifest(manifest_dir)
    sizes = manifest.warmup.get("batch_sizes") or []
    batch_sizes = [s for s in sizes if isinstance(s, int)] if isinstance(sizes, list) else []
    if not isinstance(sizes, list) or len(batch_sizes) != len(sizes):
        raise ValueError(f"manifest of {manifest.published_name}: warmup batch_sizes is not a list of "
                         f"batch sizes: {sizes!r}")
    return max(batch_sizes, default=0)


# ---------------------------------------------------------------- CLI

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``tune`` subcommand's flags (it starts its own servers: no --grpc/--rest)."""
    add_target_arguments(parser)
    parser.add_argument("--p99-budget-ms", type=float, default=None,
                        help="p99 latency budget (ms); default the largest of 5 x p99 and 20 x p50 of the default "
                             "config at concurrency 1, measured first, and 25 ms")
    parser.add_argument("--objective", choices=("throughput", "latency"), default="throughput",
                        help="what a move must improve: req/s within the budget (default) or p50 at concurrency 1")
    parser.add_argument("--batching-config", type=Path, default=REPO_ROOT / "serving" / "batching.cpu.config",
                        help="BatchingParameters tried first once batching is on, and the fields kept "
                             "(default <checkout>/serving/batching.cpu.config)")
    parser.add_argument("--protocol", choices=("grpc", "rest"), default="grpc",
                        help="the API each trial's sweep loads (default grpc)")
    parser.add_argument("--quick", action="store_true",
                        help="a few minutes on a small host: fewer values per dimension, levels 1,8, short "
                             "windows, 2 paired rounds (explicit flags still win)")
    parser.add_argument("--concurrency", default=None, help="levels of each sweep (default 1,2,4,8,16; quick 1,8); "
                                                            "1 is always measured, for the p50 at concurrency 1")
    parser.add_argument("--max-trials", type=int, default=None,
                        help="bound on candidates measured, default and final not counted (default 24; quick 9)")
    parser.add_argument("--min-gain", type=float, default=0.05, help="relative gain needed to move (default 0.05)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="paired default/candidate sweeps per candidate (default 3; quick 2)")
    parser.add_argument("--final-rounds", type=int, default=None,
                        help="fresh paired default/winner sweeps at the end (default 4; quick 3)")
    parser.add_argument("--max-error-ratio", type=float, default=0.0, help="errors allowed at a scored level")
    parser.add_argument("--window", type=float, default=None, help="measurement window, s (default 1; quick 0.5)")
    parser.add_argument("--max-level-time", type=float, default=None,
                        help="max seconds per level (default 8; quick 3)")
    parser.add_argument("--dimensions", default=None,
                        help=f"comma list of dimensions to search (default all of {','.join(space.DIMENSIONS)})")
    parser.add_argument("--grid", default=None,
                        help='JSON overriding dimension values, e.g. \'{"intra_op": [0, 1, 4], '
                             '"max_batch_size": [64, 128]}\'')
    parser.add_argument("--server-flag", action="append", default=[], help="extra TF Serving flag (repeatable)")
    parser.add_argument("--docker", action="store_true",
                        help="restart real TF Serving in Docker (needs an engine and the compose stack's TF Serving "
                             "image present locally; it is never pulled)")
    parser.add_argument("--gpu", action="store_true",
                        help="with --docker: TF Serving's -gpu image with the host's GPUs (GPU memory, XLA:GPU, "
                             "TF-TRT become searchable)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "tune",
                        help="output directory for reports (default <checkout>/out/tune)")
    parser.set_defaults(func=run_tune)


def _resolve_presets(args: argparse.Namespace) -> None:
    preset = _PRESETS["quick" if args.quick else "full"]
    for name, value in preset.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    levels = [int(x) for x in str(args.concurrency).split(",") if x.strip()]
    args.levels = tuple(sorted(set([1, *levels])))


class _Bench:
    """Paired measurements: the default config's server kept up, and one server per candidate."""

    def __init__(self, args: argparse.Namespace, target: Target, backend: space.Backend, base: Message,
                 default: space.Config) -> None:
        self.args, self.target, self.backend, self.base, self.default = args, target, backend, base, default
        self.budget_ms: Optional[float] = args.p99_budget_ms
        self.payloads: dict[str, Payload] = {}  # by variant, built against the first server serving it
        self.trials: list[Trial] = []
        self.dimension = ""

    def settings(self, levels: Optional[tuple[int, ...]] = None) -> SweepSettings:
        return SweepSettings(levels=levels or self.args.levels, window_s=self.args.window, stable_windows=3,
                             stability_pct=10.0, max_level_s=self.args.max_level_time, warmup_s=0.5,
                             latency_threshold_ms=self.budget_ms)

    def __enter__(self) -> "_Bench":
        """Start the default config once: the payload is built against it and the default budget measured."""
        with self._server(self.default, "default") as server:
            check_served(self.args.protocol, server.grpc_target if self.args.protocol == "grpc" else server.rest_url,
                         self.target.replace(variant=_variant(self.default)))
            payload = self._payload(_variant(self.default), server)
            print(f"payload {payload.label}: {payload.source}", flush=True)
            if self.budget_ms is None:
                self._warm(server, _variant(self.default))
                first = self._sweep(server, _variant(self.default), levels=(1,))[2][0]
                self.budget_ms = round(max(5 * first.p99_ms, 20 * first.p50_ms, _MIN_DEFAULT_BUDGET_MS), 1)
                print(f"p99 budget {self.budget_ms} ms: the largest of 5 x p99 ({first.p99_ms:.1f} ms) and 20 x p50 "
                      f"({first.p50_ms:.2f} ms) of the default config at concurrency 1, and "
                      f"{_MIN_DEFAULT_BUDGET_MS:g} ms; set --p99-budget-ms to fix it", flush=True)
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def _server(self, config: Mapping[str, space.Setting], directory: str) -> RunningServer:
        target = self.target.replace(variant=_variant(config))
        flags = [*space.server_flags(config, self.backend), *self.args.server_flag]
        return start_server({target.name: Path(target.model_repo) / target.name},
                            workdir=self.args.out / "trials" / directory,
                            batching=space.batching_proto(config, self.base), extra_flags=flags,
                            docker_engine=self.args.docker, gpu=self.backend.gpu)

    def _payload(self, variant: str, server: RunningServer) -> Payload:
        if variant not in self.payloads:
            self.payloads[variant] = build_payload(self.target.replace(variant=variant), grpc=server.grpc_target)
        return self.payloads[variant]

    def _sweep(self, server: RunningServer, variant: str, levels: Optional[tuple[int, ...]] = None
               ) -> tuple[float, Optional[LevelResult], list[LevelResult]]:
        payload = self._payload(variant, server)
        address = server.grpc_target if self.args.protocol == "grpc" else server.rest_url
        levels_measured = sweep_levels(transport_for(self.args.protocol, address, payload), self.settings(levels),
                                       metrics_url=server.metrics_url, model_name=payload.model_name,
                                       server_pid=server.pid)
        score, best = score_levels(levels_measured, self.budget_ms or float("inf"), self.args.max_error_ratio)
        return score, best, levels_measured

    def _warm(self, server: RunningServer, variant: str) -> None:
        """A short discarded load at the top level: a fresh server's first seconds are not counted."""
        payload = self._payload(variant, server)
        address = server.grpc_target if self.args.protocol == "grpc" else server.rest_url
        settings = SweepSettings(levels=(self.args.levels[-1],), window_s=self.args.window, stable_windows=2,
                                 max_level_s=2 * self.args.window + 0.5, warmup_s=0.5)
        sweep_levels(transport_for(self.args.protocol, address, payload), settings)

    def compare(self, config: Mapping[str, space.Setting], rounds: int, label: str = "search") -> Trial:
        """Start a fresh server for the default and one for ``config``, and sweep them in turn ``rounds`` times.

        Both servers are new, so neither has served longer than the other: on
        this project's machine a long-running embedded server answered a fresh
        one of the same config 10-25 % slower, which a kept-up default would
        have credited to every candidate.
        """
        index = len(self.trials)
        started = time.monotonic()
        trial = Trial(index, dict(config), dimension=self.dimension if label == "search" else "", label=label)
        with self._server(self.default, f"{index:02d}-default") as base:
            self._warm(base, _variant(self.default))
            best_seen = self._rounds(trial, base, config, rounds)
        _summarise_trial(trial, self.args.objective)
        if best_seen is not None:
            trial.best_level, trial.p99_at_best_ms = best_seen.level, best_seen.p99_ms
        trial.seconds = time.monotonic() - started
        self.trials.append(trial)
        print(_trial_line(trial, self.default), flush=True)
        return trial

    def _rounds(self, trial: Trial, base: RunningServer, config: Mapping[str, space.Setting], rounds: int
                ) -> Optional[LevelResult]:
        """The paired rounds of one trial, into ``trial.rounds``; the candidate's best level seen."""
        best_seen: Optional[LevelResult] = None
        try:
            with self._server(config, f"{trial.index:02d}") as server:
                self._warm(server, _variant(config))
                for number in range(rounds):
                    # ABBA order: whichever side a round sweeps second is not always the same one.
                    if number % 2 == 0:
                        base_score, _, base_levels = self._sweep(base, _variant(self.default))
                        score, best, levels = self._sweep(server, _variant(config))
                    else:
                        score, best, levels = self._sweep(server, _variant(config))
                        base_score, _, base_levels = self._sweep(base, _variant(self.default))
                    trial.rounds.append(_round(base_score, base_levels, score, levels))
                    if best is not None and (best_seen is None or best.throughput_rps > best_seen.throughput_rps):
                        best_seen = best
                    if best is None and levels:
                        low = levels[0]
                        trial.note = (f"no level within budget: c={low.level:g} had p99 {low.p99_ms:.1f} ms, "
                                      f"{low.errors} errors")
        except Exception as error:  # a config the server rejects scores 0 and the search goes on
            text = str(error)
            trial.error = f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"
        return best_seen


def _variant(config: Mapping[str, space.Setting]) -> str:
    """The model variant of ``config`` (``fp32``, ``xla``, ...): a name, never a number."""
    variant = config["variant"]
    if not isinstance(variant, str):
        raise TypeError(f"variant is a variant name, not {variant!r}")
    return variant


def _compact(levels: Sequence[LevelResult]) -> list[CompactLevel]:
    """What a round keeps of a sweep: per level, throughput, p50/p99, errors and the server's CPU per request."""
    return [{"level": r.level, "throughput_rps": round(r.throughput_rps, 2), "p50_ms": round(r.p50_ms, 3),
             "p99_ms": round(r.p99_ms, 3), "errors": r.errors,
             "server_cpu_ms_per_request": (round(10.0 * r.server_cpu_pct / r.throughput_rps, 3)
                                           if r.server_cpu_pct is not None and r.throughput_rps else None)}
            for r in levels]


def _round(base_score: float, base_levels: Sequence[LevelResult], score: float,
           levels: Sequence[LevelResult]) -> TuneRound:
    def p50_c1(found: Sequence[LevelResult]) -> Optional[float]:
        return next((r.p50_ms for r in found if r.level == 1 and r.requests > r.errors), None)

    def cpu_ms(found: Sequence[LevelResult]) -> Optional[float]:
        top = [r for r in found if r.level == max(x.level for x in found)] if found else []
        if not top or top[0].server_cpu_pct is None or not top[0].throughput_rps:
            return None
        return 10.0 * top[0].server_cpu_pct / top[0].throughput_rps

    return {"baseline_rps": base_score, "candidate_rps": score,
            "baseline_cpu_ms": cpu_ms(base_levels), "candidate_cpu_ms": cpu_ms(levels),
            "baseline_p50_c1_ms": p50_c1(base_levels), "candidate_p50_c1_ms": p50_c1(levels),
            "baseline_levels": _compact(base_levels), "candidate_levels": _compact(levels)}


def _summarise_trial(trial: Trial, objective: str) -> None:
    if not trial.rounds:
        return
    # A round where one side had no level within the budget says nothing about the ratio: left out, and said.
    rounds = [r for r in trial.rounds if r["baseline_rps"] > 0 and r["candidate_rps"] > 0] or trial.rounds
    if len(rounds) < len(trial.rounds):
        trial.note = (f"{len(trial.rounds) - len(rounds)} of {len(trial.rounds)} rounds left out of the throughput "
                      "ratio: a side had no level within the budget" + (f"; {trial.note}" if trial.note else ""))
    trial.baseline_rps = _mean([r["baseline_rps"] for r in rounds]) or 0.0
    trial.score_rps = _mean([r["candidate_rps"] for r in rounds]) or 0.0
    trial.throughput_ratio = trial.score_rps / trial.baseline_rps if trial.baseline_rps else 0.0
    trial.throughput_spread = spread(round_ratios(rounds, "candidate_rps", "baseline_rps"))
    trial.baseline_p50_c1_ms = _mean([r["baseline_p50_c1_ms"] for r in rounds])
    trial.p50_c1_ms = _mean([r["candidate_p50_c1_ms"] for r in rounds])
    if trial.p50_c1_ms and trial.baseline_p50_c1_ms:
        trial.latency_ratio = trial.baseline_p50_c1_ms / trial.p50_c1_ms
    trial.latency_spread = spread(round_ratios(rounds, "candidate_p50_c1_ms", "baseline_p50_c1_ms", False))
    trial.cpu_ms_per_request = _mean([r["candidate_cpu_ms"] for r in rounds])
    trial.baseline_cpu_ms_per_request = _mean([r["baseline_cpu_ms"] for r in rounds])
    if objective == "throughput":
        trial.ratio, trial.score = trial.throughput_ratio, trial.throughput_ratio - trial.throughput_spread
    else:
        trial.ratio, trial.score = trial.latency_ratio, trial.latency_ratio - trial.latency_spread


def describe_config(config: Mapping[str, space.Setting], reference: Mapping[str, space.Setting]) -> str:
    """The dimensions where ``config`` differs from ``reference``, ``name=value`` each ("default" if none)."""
    diff = [f"{k}={config[k]}" for k in space.DIMENSIONS if config.get(k) != reference.get(k)]
    return " ".join(diff) or "default"


def _trial_line(trial: Trial, default: Mapping[str, space.Setting]) -> str:
    rounds = ", ".join(f"{r['candidate_rps']:.0f}/{r['baseline_rps']:.0f}" for r in trial.rounds)
    p50 = (f"; p50 c=1 {trial.baseline_p50_c1_ms:.2f} -> {trial.p50_c1_ms:.2f} ms"
           if trial.p50_c1_ms and trial.baseline_p50_c1_ms else "")
    return (f"trial {trial.index:2d} {trial.label:6s} {describe_config(trial.config, default)}: "
            f"{trial.score_rps:7.1f} vs default {trial.baseline_rps:7.1f} req/s "
            f"(x{trial.throughput_ratio:.2f} ±{trial.throughput_spread:.2f}; rounds {rounds}){p50}"
            + (f" ERROR {trial.error}" if trial.error else "") + (f" ({trial.note})" if trial.note else ""))


def _grid(args: argparse.Namespace, start: space.Config, floor: int, skipped: Mapping[str, str]
          ) -> dict[str, tuple[space.Setting, ...]]:
    variants = tuple(v for v in ("fp32", "xla", "trt-fp16") if f"variant:{v}" not in skipped or v == start["variant"])
    make = space.quick_grid if args.quick else space.default_grid
    grid = make(space.host_cpus(), start, variants, floor)
    if args.grid:
        for name, values in json.loads(args.grid).items():
            if name not in space.DIMENSIONS:
                raise SystemExit(f"--grid: unknown dimension {name!r}; dimensions are {', '.join(space.DIMENSIONS)}")
            grid[name] = tuple(values)
    wanted = set(args.dimensions.split(",")) if args.dimensions else set(space.DIMENSIONS)
    unknown = wanted - set(space.DIMENSIONS)
    if unknown:
        raise SystemExit(f"--dimensions: unknown {', '.join(sorted(unknown))}; "
                         f"dimensions are {', '.join(space.DIMENSIONS)}")
    for name in space.DIMENSIONS:
        if name not in wanted or name in skipped:
            grid[name] = (start[name],)
    return {name: grid[name] for name in space.DIMENSIONS}


def run_tune(args: argparse.Namespace) -> int:
    """The ``tune`` subcommand."""
    _resolve_presets(args)
    if args.gpu and not args.docker:
        raise SystemExit("--gpu needs --docker: the embedded server runs TensorFlow's CPU build")
    if args.docker:
        docker_image(args.gpu)  # no engine, or the image is absent: stop now, with the reason
    args.out.mkdir(parents=True, exist_ok=True)
    target = targets_from_args(args)[0]
    backend = space.Backend("docker" if args.docker else "embedded", gpu=args.gpu)
    base = load_batching_parameters(args.batching_config)
    skipped = space.skipped_dimensions(backend, target.model, target.model_repo)
    floors = [warmup_batch_floor(target.replace(variant=v)) for v in ("fp32", "xla", "trt-fp16")
              if f"variant:{v}" not in skipped]
    floor = max(floors, default=0)
    batching_start = params_of(base)
    if batching_start["max_batch_size"] < floor:
        print(f"note: {args.batching_config} has max_batch_size {batching_start['max_batch_size']}, below the "
              f"largest warmup batch ({floor}) of {target.model}; TF Serving would fail the load, so batching "
              f"starts at max_batch_size {floor}", flush=True)
        batching_start["max_batch_size"] = floor
    default = space.default_config(target.variant, batching_start)
    grid = _grid(args, default, floor, skipped)
    searched = [name for name in space.DIMENSIONS if len(grid[name]) > 1]
    print(f"tuning {target.model} on the {backend.name} server over {args.protocol}: objective {args.objective}, "
          f"dimensions {', '.join(searched)}; at most {args.max_trials} candidates, {args.rounds} paired rounds "
          f"each, levels {','.join(map(str, args.levels))}", flush=True)
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}", flush=True)
    started = time.monotonic()
    with _Bench(args, target, backend, base, default) as bench:
        best, _ = coordinate_descent(
            default, grid, lambda config: bench.compare(config, args.rounds).score,
            max_trials=args.max_trials, min_gain=args.min_gain, start_score=1.0, exhaustive=_EXHAUSTIVE,
            normalize=lambda config: space.normalize(config, default),
            on_dimension=lambda name: setattr(bench, "dimension", name))
        # The winner in fresh rounds; with no winner, the default against itself shows the noise floor.
        final = bench.compare(best, args.final_rounds, "final")
    summary = {"model": target.model, "backend": backend.name, "gpu": backend.gpu, "protocol": args.protocol,
               "objective": args.objective, "p99_budget_ms": bench.budget_ms, "min_gain": args.min_gain,
               "levels": list(args.levels), "rounds": args.rounds, "final_rounds": args.final_rounds,
               "quick": args.quick, "cpus": space.host_cpus(), "load_average": list(os.getloadavg()),
               "seconds": round(time.monotonic() - started, 1), "batching_config": str(args.batching_config),
               "payload": bench.payloads[_variant(default)].describe(), "default": default, "search_best": best,
               "grid": {k: list(v) for k, v in grid.items()}, "skipped": skipped,
               "trials": [asdict(t) for t in bench.trials], "final": asdict(final),
               "command": "python -m loadtest " + " ".join(getattr(args, "argv", None) or ["tune"])}
    paths = write_report(summary, args.out, base)
    print(paths["markdown"].read_text())
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0
