"""Batching on against off, side by side: server-side batching must never cost.

Two embedded servers (``serving.launcher.ServerProcess``) serve the same
model, one without batching and one with ``--enable_batching`` (max batch 32,
``batch_timeout_micros`` 1000, threads = cores: the configuration the speed
targets were set for); they are started per model and stopped before the next.
Each load is measured on one server then the other, in interleaved rounds (the
first side alternates), so the shared machine's drift hits both alike
(``benchmarks.runner``). Per side it records requests/s, p50/p99, the server's
CPU-ms per request (``/proc/<pid>/stat``, the steadiest figure on a shared
machine) and, with batching, the mean rows per batch (TF Serving's
``processed_batch_size`` histogram, scraped around each window); a ratio is the
median of the rounds' ratios, and so is the p50 delta.

Targets (exit status 1 if one is missed, and the report says which):

- digits REST c=32 and gRPC c=32: batching on >= ``BATCHING_GAIN_SMALL`` x off (requests/s);
- digits REST c=1: batching adds <= ``batch_timeout_micros`` + ``BATCHING_ADDED_P50_MS`` to p50;
- resnet50 gRPC c=8: batching on >= ``BATCHING_GAIN_LARGE`` x off (requests/s)

(the limits of ``benchmarks.targets``, which every batching benchmark shares).

    python -m benchmarks.batching                          # models from <checkout>/models
    python -m benchmarks.batching --model-repo models --rounds 5
    python -m benchmarks.batching --models digits --server-flag=--tensorflow_intra_op_parallelism=1
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import urllib.request
from pathlib import Path
from typing import Mapping, Optional, Sequence

from benchmarks import runner
from benchmarks.runner import Cell, Compare, Load, Scenario
from benchmarks.servers import embedded
from benchmarks.targets import BATCHING_ADDED_P50_MS, BATCHING_GAIN_LARGE, BATCHING_GAIN_SMALL
from serving.checkout import REPO_ROOT
from serving.launcher import MONITORING_PATH, ServerProcess

__all__ = ["BATCHING", "LOADS", "batch_totals", "batching_parameters", "build_parser", "main", "mean_batch",
           "scenario", "targets"]

BATCHING: dict[str, int] = {
    # The configuration the speed targets were set for: batches of at most 32 rows, a 1 ms timeout, one thread per core.
    # Tasks up to 64 rows are accepted (and split), so the exporter's warmup requests still load.
    "max_batch_size": 64,
    "enable_large_batch_splitting": True,
    "max_execution_batch_size": 32,
    "batch_timeout_micros": 1000,
    "max_enqueued_batches": 1000,
}

LOADS = (Load("digits", "rest", 1), Load("digits", "rest", 32), Load("digits", "grpc", 32),
         Load("resnet50", "grpc", 8))


def batching_parameters(threads: int, batch_timeout_micros: int = BATCHING["batch_timeout_micros"]) -> dict[str, int]:
    """``BATCHING`` with ``num_batch_threads`` = ``threads`` (and another timeout if given)."""
    return {**BATCHING, "num_batch_threads": threads, "batch_timeout_micros": batch_timeout_micros}


_PROCESSED = ":tensorflow:serving:batching_session:processed_batch_size_"


def batch_totals(server: ServerProcess) -> dict[str, float]:
    """Rows and batches run so far (``processed_batch_size`` sum and count; zeros without batching)."""
    with urllib.request.urlopen(server.rest_url + MONITORING_PATH, timeout=30) as response:
        text = response.read().decode()
    totals = {"rows": 0.0, "batches": 0.0}
    for line in text.splitlines():
        if line.startswith(_PROCESSED):
            kind = {"sum": "rows", "count": "batches"}.get(line[len(_PROCESSED):].split("{", 1)[0])
            if kind:
                totals[kind] += float(line.rsplit(" ", 1)[1])
    return totals


def mean_batch(cell: Cell) -> str:
    """The batch column: mean rows per batch over the cell's windows (``-`` when none ran)."""
    batches = cell.counted.get("batches", 0.0)
    return "-" if not batches else f"{cell.counted['rows'] / batches:.1f}"


def targets(batch_timeout_micros: int = BATCHING["batch_timeout_micros"]) -> list[Compare]:
    """The batching targets: never slower (requests/s, on over off); a bounded p50 added at c=1."""
    gains = [Compare(f"{load.model} {load.protocol} c={load.concurrency}: batching on / off (req/s, median of "
                     "{rounds} rounds; pooled {pooled:.2f}x)", ("on", load), ("off", load), limit)
             for load, limit in ((LOADS[1], BATCHING_GAIN_SMALL), (LOADS[2], BATCHING_GAIN_SMALL),
                                 (LOADS[3], BATCHING_GAIN_LARGE))]
    return gains + [Compare("digits rest c=1: p50 added by batching (median of {rounds} rounds)",
                            ("on", LOADS[0]), ("off", LOADS[0]),
                            batch_timeout_micros / 1e3 + BATCHING_ADDED_P50_MS, metric="p50")]


def scenario(repo: Path, models: Sequence[str], batching: Mapping[str, int], server_flags: Sequence[str] = (),
             rounds: int = 5, warmup: float = 1.0, duration: float = 2.0, resnet50_duration: float = 10.0) -> Scenario:
    """Off and on, per model, under ``LOADS`` of ``models``; both servers get ``server_flags``."""
    servers = [embedded(label, repo, batching=parameters, flags=server_flags, counters=batch_totals)
               for label, parameters in (("off", None), ("on", batching))]
    return Scenario(servers, [load for load in LOADS if load.model in models],
                    targets(batching["batch_timeout_micros"]), rounds, warmup, duration,
                    {"resnet50": resnet50_duration}, per_model=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.batching", description=__doc__.split("\n")[0])
    parser.add_argument("--model-repo", type=Path, default=REPO_ROOT / "models", metavar="DIR",
                        help="model repository holding digits and resnet50 (default: <checkout>/models)")
    runner.add_arguments(parser, rounds=5, duration=2.0, resnet50_duration=10.0)
    parser.add_argument("--models", default="digits,resnet50", help="comma-separated: digits, resnet50")
    parser.add_argument("--batch-timeout-micros", type=int, default=BATCHING["batch_timeout_micros"],
                        help="batch_timeout_micros of the batching side (the c=1 target allows it + 0.5 ms)")
    parser.add_argument("--server-flag", action="append", default=[], metavar="FLAG",
                        help="a TF Serving flag for both servers, e.g. --server-flag=--tensorflow_intra_op_parallelism=1 "
                             "(repeatable)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s] %(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser().parse_args(argv)
    load_before = os.getloadavg()[0]
    batching = batching_parameters(len(os.sched_getaffinity(0)), args.batch_timeout_micros)
    declared = scenario(args.model_repo.resolve(), args.models.split(","), batching, args.server_flag, args.rounds,
                        args.warmup, args.duration, args.resnet50_duration)
    cells = runner.run(declared)
    found = runner.print_report(cells, declared.targets, [
        f"NOTE  batching: {batching}; flags of both servers: {args.server_flag or 'defaults'}",
        runner.machine_note(load_before, "ratios are measured side by side, in interleaved rounds")],
        baseline="off", columns={"batch": mean_batch})
    runner.write_json(args.json, "benchmarks.batching", cells)
    missed = [t.name for t in found if not t.passed]
    if missed:
        print("MISSED: " + "; ".join(missed))
    return 1 if missed or not found else 0


if __name__ == "__main__":
    sys.exit(main())
