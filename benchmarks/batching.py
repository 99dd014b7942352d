"""Batching on against off, side by side: server-side batching must never cost.

Two embedded servers (``serving.server.launcher.ServerProcess``) serve the same
model, one without batching and one with ``--enable_batching`` (max batch 32,
``batch_timeout_micros`` 1000, threads = cores: the configuration the speed
targets were set for). Each case is measured on one server then the other, in interleaved
rounds (the first side alternates), so the shared machine's drift hits both alike.
Per side it records requests/s, p50/p99, the server's CPU-ms per request
(``/proc/<pid>/stat``, the steadiest figure on a shared machine) and, with
batching, the mean rows per batch (TF Serving's ``processed_batch_size``
histogram, scraped around each window); a rate ratio
is the median of the rounds' ratios, the p50 delta is taken over all rounds.

Targets (exit status 1 if one is missed, and the report says which):

- digits REST c=32 and gRPC c=32: batching on >= 1.0 x off (requests/s);
- digits REST c=1: batching adds <= ``batch_timeout_micros`` + 0.5 ms to p50;
- resnet50 gRPC c=8: batching on >= 1.1 x off (requests/s).

    python -m benchmarks.batching                          # models from <checkout>/models
    python -m benchmarks.batching --model-repo /work/models --rounds 5
    python -m benchmarks.batching --models digits --server-flag=--tensorflow_intra_op_parallelism=1

Importable without side effects: ``measure(...)`` and ``evaluate(...)`` serve
other benchmarks (``benchmarks.peers``).
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.server import Target, print_verdicts, process_cpu_seconds, run_grpc, run_rest
from exporter.manifest import load_manifest
from serving import codec
from serving.model_repo import model_versions
from serving.server.launcher import MONITORING_PATH, REPO_ROOT, ServerProcess

__all__ = [
    "BATCHING",
    "DEFAULT_CASES",
    "Case",
    "Side",
    "Target",
    "batching_parameters",
    "build_parser",
    "evaluate",
    "main",
    "measure",
    "print_report",
    "rate_ratio",
]

logger = logging.getLogger("benchmarks.batching")

BATCHING: dict[str, int] = {
    # The configuration the speed targets were set for: batches of at most 32 rows, a 1 ms timeout, one thread per core.
    # Tasks up to 64 rows are accepted (and split), so the exporter's warmup requests still load.
    "max_batch_size": 64,
    "enable_large_batch_splitting": True,
    "max_execution_batch_size": 32,
    "batch_timeout_micros": 1000,
    "max_enqueued_batches": 1000,
}


@dataclass(frozen=True)
class Case:
    """One load: ``concurrency`` closed-loop clients of ``model`` over ``protocol``."""

    model: str
    protocol: str  # "grpc" or "rest"
    concurrency: int
    duration: float  # seconds measured per side and round


DEFAULT_CASES = (
    Case("digits", "rest", 1, 2.0),
    Case("digits", "rest", 32, 2.0),
    Case("digits", "grpc", 32, 2.0),
    Case("resnet50", "grpc", 8, 10.0),
)


@dataclass
class Side:
    """One server's figures for one case, pooled over the rounds."""

    case: Case
    batching: str  # "off" or "on"
    latencies: list[float] = field(default_factory=list, repr=False)
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    errors: int = 0
    round_rates: list[float] = field(default_factory=list)
    batched_rows: float = 0.0  # processed_batch_size sum and count over the measured windows
    batches: float = 0.0

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else float("nan")

    @property
    def cpu_ms_per_request(self) -> float:
        return 1e3 * self.cpu_seconds / len(self.latencies) if self.latencies else float("nan")

    @property
    def mean_batch(self) -> float:
        return self.batched_rows / self.batches if self.batches else float("nan")

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies, q)) if self.latencies else float("nan")


def batching_parameters(threads: int, batch_timeout_micros: int = BATCHING["batch_timeout_micros"]) -> dict[str, int]:
    """``BATCHING`` with ``num_batch_threads`` = ``threads`` (and another timeout if given)."""
    return {**BATCHING, "num_batch_threads": threads, "batch_timeout_micros": batch_timeout_micros}


_PROCESSED = ":tensorflow:serving:batching_session:processed_batch_size_"


def _batch_totals(server: ServerProcess) -> tuple[float, float]:
    """Rows and batches run so far (``processed_batch_size`` sum and count; zeros without batching)."""
    with urllib.request.urlopen(server.rest_url + MONITORING_PATH, timeout=30) as response:
        text = response.read().decode()
    totals = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        if line.startswith(_PROCESSED):
            kind = line[len(_PROCESSED):].split("{", 1)[0]
            if kind in totals:
                totals[kind] += float(line.rsplit(" ", 1)[1])
    return totals["sum"], totals["count"]


@contextlib.contextmanager
def _servers(repo: Path, model: str, workdir: Path, batching: Mapping[str, int],
             server_flags: Sequence[str] = ()) -> Iterator[dict[str, ServerProcess]]:
    """Two servers of ``model``, without and with ``batching``, up at the same time (both with
    ``server_flags``)."""
    with contextlib.ExitStack() as stack:
        servers = {}
        for label, parameters in (("off", None), ("on", batching)):
            servers[label] = stack.enter_context(ServerProcess.for_models(
                {model: repo / model}, workdir=workdir / f"{model}-{label}", batching=parameters, extra_flags=server_flags,
                timeout=900))
        yield servers


def _load(server: ServerProcess, case: Case, payloads: tuple[bytes, bytes], warmup: float,
          duration: float) -> tuple[list[float], int]:
    grpc_payload, rest_body = payloads
    if case.protocol == "grpc":
        return run_grpc(server.grpc_target, grpc_payload, case.concurrency, warmup, duration)
    return run_rest(server.rest_url, case.model, rest_body, case.concurrency, warmup, duration)


def _payloads(repo: Path, model: str) -> tuple[bytes, bytes]:
    """One-row gRPC PredictRequest bytes and REST body from the model's manifest."""
    version = max(model_versions(repo / model))
    inputs = load_manifest(repo / model / str(version)).sample_inputs(batch_size=1)
    return (codec.encode_predict_request(model, inputs, signature_name=codec.DEFAULT_SIGNATURE),
            codec.inputs_to_rest_request(inputs))


def measure(repo: Path, cases: Sequence[Case] = DEFAULT_CASES, rounds: int = 5, warmup: float = 1.0,
            workdir: Path | None = None, batching: Mapping[str, int] | None = None,
            server_flags: Sequence[str] = ()) -> list[Side]:
    """Every case on both servers, in ``rounds`` interleaved rounds; two ``Side``s per case (off, on).

    ``batching`` is the on side's ``BatchingParameters`` (default ``batching_parameters(cores)``);
    ``server_flags`` go to both servers.
    Servers are started per model (both sides at once) and stopped before the next model.
    """
    batching = batching or batching_parameters(len(os.sched_getaffinity(0)))
    sides: list[Side] = []
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-batching-")))
        for model in dict.fromkeys(case.model for case in cases):
            model_cases = [case for case in cases if case.model == model]
            payloads = _payloads(repo, model)
            with _servers(repo, model, workdir, batching, server_flags) as servers:
                pairs = {case: {label: Side(case, label) for label in servers} for case in model_cases}
                for index in range(rounds):
                    for case in model_cases:
                        order = list(servers) if index % 2 == 0 else list(reversed(servers))
                        for label in order:
                            _measure_once(servers[label], case, payloads, warmup, pairs[case][label])
                for case in model_cases:
                    sides += pairs[case].values()
    return sides


def _measure_once(server: ServerProcess, case: Case, payloads: tuple[bytes, bytes], warmup: float,
                  side: Side) -> None:
    """A warmup load, then one measured window whose server CPU time is read around it."""
    _load(server, case, payloads, 0.0, warmup)
    assert server.pid is not None
    rows_before, batches_before = _batch_totals(server)
    cpu_before = process_cpu_seconds(server.pid)
    latencies, errors = _load(server, case, payloads, 0.0, case.duration)
    side.cpu_seconds += process_cpu_seconds(server.pid) - cpu_before
    rows_after, batches_after = _batch_totals(server)
    side.batched_rows += rows_after - rows_before
    side.batches += batches_after - batches_before
    side.latencies += latencies
    side.seconds += case.duration
    side.errors += errors
    side.round_rates.append(len(latencies) / case.duration)
    logger.info("%s %s c=%d batching %s: %.1f req/s p50 %.2f ms", case.model, case.protocol, case.concurrency,
                side.batching, len(latencies) / case.duration,
                float(np.percentile(latencies, 50)) * 1e3 if latencies else float("nan"))


def _pair(sides: Sequence[Side], model: str, protocol: str, concurrency: int) -> tuple[Side, Side] | None:
    found = {s.batching: s for s in sides
             if (s.case.model, s.case.protocol, s.case.concurrency) == (model, protocol, concurrency)}
    return (found["off"], found["on"]) if {"off", "on"} <= set(found) else None


def rate_ratio(off: Side, on: Side) -> float:
    """On over off in requests/s: the median of the per-round ratios (each round measures both
    sides seconds apart, so a burst of other work on the machine skews one round, not the result)."""
    ratios = [b / a for a, b in zip(off.round_rates, on.round_rates) if a > 0]
    return float(np.median(ratios)) if ratios else float("nan")


def evaluate(sides: Sequence[Side], batch_timeout_micros: int = BATCHING["batch_timeout_micros"]) -> list[Target]:
    """The batching targets (never slower; bounded added p50), from whichever cases were measured."""
    targets = []
    for model, protocol, concurrency, limit in (("digits", "rest", 32, 1.0), ("digits", "grpc", 32, 1.0),
                                                ("resnet50", "grpc", 8, 1.1)):
        pair = _pair(sides, model, protocol, concurrency)
        if pair:
            off, on = pair
            targets.append(Target(
                f"{model} {on.case.protocol} c={concurrency}: batching on / off (req/s, median of "
                f"{len(on.round_rates)} rounds; pooled {on.rate / max(off.rate, 1e-9):.2f}x)",
                rate_ratio(off, on), limit))
    pair = _pair(sides, "digits", "rest", 1)
    if pair:
        off, on = pair
        targets.append(Target(f"digits {on.case.protocol} c=1: p50 added by batching (pooled rounds)",
                              (on.percentile(50) - off.percentile(50)) * 1e3, batch_timeout_micros / 1e3 + 0.5,
                              higher_is_better=False, unit=" ms"))
    return targets


def print_report(sides: Sequence[Side], targets: Sequence[Target], remarks: Sequence[str] = ()) -> None:
    header = (f"{'model':<10} {'path':<5} {'load':>5} {'batching':<8} {'req/s':>8} {'spread':>8} {'p50 ms':>8} "
              f"{'p99 ms':>8} {'CPU ms/req':>10} {'batch':>6} {'errors':>6}")
    print(header)
    print("-" * len(header))
    for s in sides:
        rates = s.round_rates
        spread = (max(rates) - min(rates)) / 2 / np.mean(rates) * 100 if len(rates) > 1 and np.mean(rates) else 0.0
        print(f"{s.case.model:<10} {s.case.protocol:<5} {'c' + str(s.case.concurrency):>5} {s.batching:<8} "
              f"{s.rate:>8.1f} {f'±{spread:.0f}%':>8} {s.percentile(50) * 1e3:>8.2f} {s.percentile(99) * 1e3:>8.2f} "
              f"{s.cpu_ms_per_request:>10.3f} {_mean_batch_text(s):>6} {s.errors:>6}")
    print()
    print_verdicts(targets, remarks)


def _mean_batch_text(side: Side) -> str:
    return "-" if not side.batches else f"{side.mean_batch:.1f}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.batching", description=__doc__.split("\n")[0])
    parser.add_argument("--model-repo", type=Path, default=REPO_ROOT / "models", metavar="DIR",
                        help="model repository holding digits and resnet50 (default: <checkout>/models)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds per case (ratios: median of the rounds' ratios)")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of load before each window")
    parser.add_argument("--duration", type=float, default=2.0, help="seconds measured per digits window")
    parser.add_argument("--resnet50-duration", type=float, default=10.0,
                        help="seconds measured per resnet50 window (a batch takes seconds on CPU)")
    parser.add_argument("--models", default="digits,resnet50", help="comma-separated: digits, resnet50")
    parser.add_argument("--batch-timeout-micros", type=int, default=BATCHING["batch_timeout_micros"],
                        help="batch_timeout_micros of the batching side (the c=1 target allows it + 0.5 ms)")
    parser.add_argument("--server-flag", action="append", default=[], metavar="FLAG",
                        help="a TF Serving flag for both servers, e.g. --server-flag=--tensorflow_intra_op_parallelism=1 "
                             "(repeatable)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s] %(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser().parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    cases = [Case(c.model, c.protocol, c.concurrency,
                  args.resnet50_duration if c.model == "resnet50" else args.duration)
             for c in DEFAULT_CASES if c.model in models]
    load_before = os.getloadavg()[0]
    batching = batching_parameters(len(os.sched_getaffinity(0)), args.batch_timeout_micros)
    sides = measure(args.model_repo.resolve(), cases, rounds=args.rounds, warmup=args.warmup, batching=batching,
                    server_flags=args.server_flag)
    targets = evaluate(sides, args.batch_timeout_micros)
    print_report(sides, targets, [
        f"NOTE  batching: {batching}; flags of both servers: {args.server_flag or 'defaults'}",
        (f"NOTE  {len(os.sched_getaffinity(0))} cores; 1-min load average {load_before:.1f} at the start, "
         f"{os.getloadavg()[0]:.1f} at the end (ratios are measured side by side, in interleaved rounds)")])
    missed = [t.name for t in targets if not t.passed]
    if missed:
        print("MISSED: " + "; ".join(missed))
    return 1 if missed or not targets else 0


if __name__ == "__main__":
    sys.exit(main())
