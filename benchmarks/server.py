"""The embedded server against the model run in-process: one run, side by side, with ratios.

Measured, in this order, in one invocation:

1. in-process: each model loaded exactly as the server loads it
   (``SavedModelLoader``), ``Servable.run_direct`` timed at several batch
   sizes from 1 thread and from one thread per core — the ceiling for the
   server's throughput, and the floor for its latency;
2. two embedded servers (``python -m serving.server``), up at the same time:
   one without batching, one with ``--enable_batching`` (``--batching-config``,
   or ``default_batching``); closed-loop clients over gRPC and REST at
   each concurrency (one row per request), each point measured on one server
   then the other (``--repeats`` rounds, the first side rotating), so the shared
   machine's changing load hits both sides alike;
3. beside digits over gRPC at concurrency 32, a canned gRPC servicer
   (``benchmarks.loadgen``) that answers without any work, same client and
   payload: the most requests/s any Python gRPC front-end reaches here. With the
   model's best in-process cost per row added, it bounds what any batching server
   could reach here (``batching_bound``), and so the batching ratio;
4. what the targets compare, measured again in turn (``--side-by-side-rounds``), so
   the machine's drift hits both: resnet50 in-process at its best batch size and
   gRPC with batching at its best concurrency; digits in-process at batch 1 from
   one thread and each protocol without batching at concurrency 1.

Every step is a declaration on ``benchmarks.runner``. Then it prints the table
and PASS/FAIL per target (the limits of ``benchmarks.targets``):

- ``resnet50``: gRPC with batching at its best concurrency ≥ ``SERVED_OVER_IN_PROCESS`` × in-process
  at its best batch size (rows/s), the two measured in turn;
- ``digits``: gRPC at concurrency 32, batching ≥ ``BATCHING_GAIN_SMALL`` × no batching
  (batching never costs);
- ``digits``: p50 at concurrency 1 (server, no batching) minus in-process p50 at batch 1
  ≤ ``SERVER_ADDED_P50_MS``, the two measured in turn.

Clients are ``loadtest.driver``'s closed loop, built to cost as little CPU as possible
(the machine is shared): one pre-serialized gRPC request on a bytes-in/bytes-out stub,
or one keep-alive ``http.client`` connection, per client thread.

    python -m benchmarks.server                                   # digits and resnet50
    python -m benchmarks.server --models digits --duration 2
    python -m benchmarks.server --model-repo models --batching-config serving/batching.cpu.config

``--model-repo`` defaults to ``<checkout>/models``; a model without a version
there is exported first (version 1, the exporter's ``ensure``). The servers
are started with ``serving.launcher``.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Mapping, NamedTuple, Optional, Sequence

from google.protobuf import text_format

from benchmarks import runner
from benchmarks.runner import Cell, Cells, Compare, Load, Scenario, Served
from benchmarks.servers import canned, embedded, in_process, running
from benchmarks.targets import BATCHING_GAIN_SMALL, SERVED_OVER_IN_PROCESS, SERVER_ADDED_P50_MS
from exporter.export import ensure_model
from serving.checkout import REPO_ROOT
from serving.config.files import BatchingSpec
from serving.config.protos import batching_parameters_class

__all__ = ["FLOOR", "IN_PROCESS", "InProcessPoint", "batching_bound", "build_parser", "default_batching", "main",
           "measure_in_process", "notes", "paired", "targets"]

logger = logging.getLogger("benchmarks.server")

IN_PROCESS_BATCH_SIZES = {"digits": (1, 8, 32, 128), "resnet50": (1, 4, 16)}
IN_PROCESS = "servable"
"""The in-process server's name (``benchmarks.servers.in_process``); ``PAIRED`` is appended in step 4."""
PAIRED = ", paired"
FLOOR = Load("digits", "grpc", 32)
"""Where the canned servicer is measured beside the two servers."""
SERVER_FLAGS = ("--file_system_poll_wait_seconds=0",)


def default_batching(threads: int, rows: int) -> dict[str, int]:
    """After TF Serving's CPU advice (batching/README.md): threads = cores, no timeout, a generous queue
    while measuring. Batches run at most ``rows``, the batch size resnet50 ran fastest at in-process in
    this run (on CPU a larger batch is slower per row: on 2 cores batch 16 runs fewer rows/s than 4).
    Tasks up to 64 rows are accepted and split, so the exporter's warmup requests (batch sizes up to 64,
    from serving/batching.config) still load."""
    return {"max_batch_size": 64, "enable_large_batch_splitting": True, "max_execution_batch_size": rows,
            "batch_timeout_micros": 0, "max_enqueued_batches": 1000, "num_batch_threads": threads}


class InProcessPoint(NamedTuple):
    """One in-process rate, for ``benchmarks.peers``: ``load`` rows per call from ``batching`` = ``t<threads>``."""

    load: int
    batching: str
    rows_per_s: float


def in_process_loads(model: str, threads: Sequence[int], batch_sizes: Optional[Sequence[int]] = None) -> list[Load]:
    sizes = batch_sizes or IN_PROCESS_BATCH_SIZES.get(model, (1, 8, 32))
    return [Load(model, "in-process", t, b) for b in sizes for t in threads]


def measure_in_process(model: str, version_dir: Path, duration: float, batch_sizes: Sequence[int],
                       thread_counts: Sequence[int]) -> list[InProcessPoint]:
    """``Servable.run_direct`` of ``model`` (in ``version_dir``'s repository) at each batch size from each
    thread count, one window each."""
    cells = runner.run(Scenario([in_process(IN_PROCESS, version_dir.parent.parent)],
                                in_process_loads(model, thread_counts, batch_sizes), rounds=1, duration=duration))
    return [InProcessPoint(load.batch, f"t{load.concurrency}", cell.figure("rows"))
            for (_, load), cell in cells.items()]


def _best(cells: Cells, server: str, model: str, protocol: str = "in-process") -> Optional[Cell]:
    """The cell of ``server`` that ran the most rows/s of ``model`` over ``protocol``."""
    found = [c for (name, load), c in cells.items() if (name, load.model, load.protocol) == (server, model, protocol)]
    return max(found, key=lambda c: c.figure("rows")) if found else None


def _pairs(cells: Cells, protocols: Sequence[str]) -> dict[str, list[Load]]:
    """What the targets compare, per server of step 1 and 2: resnet50 in-process at its best batch size
    and gRPC with batching at its best concurrency; digits in-process batch 1 on one thread and each
    protocol without batching at concurrency 1."""
    pairs: dict[str, list[Load]] = {IN_PROCESS: [], "on": [], "off": []}
    local, served = _best(cells, IN_PROCESS, "resnet50"), _best(cells, "on", "resnet50", "grpc")
    if local and served:
        pairs[IN_PROCESS].append(local.load)
        pairs["on"].append(served.load)
    if (IN_PROCESS, Load("digits", "in-process", 1)) in cells:
        pairs[IN_PROCESS].append(Load("digits", "in-process", 1))
        pairs["off"] += [Load("digits", protocol, 1) for protocol in protocols]
    return pairs


def paired(cells: Cells, repo: Path, servers: Mapping[str, Served], protocols: Sequence[str], rounds: int,
           warmup: float, durations: Mapping[str, float]) -> Scenario:
    """Step 4: what the targets compare (``_pairs``), again, in turn, ``rounds`` times. The in-process and
    server figures above are taken minutes apart, and a shared 2-core machine changes speed by tens of
    percent in that time; this measures them within seconds of each other."""
    pairs = _pairs(cells, protocols)
    declared = [in_process(label + PAIRED, repo, tuple(loads)) if label == IN_PROCESS
                else running(label + PAIRED, servers[label], tuple(loads)) for label, loads in pairs.items() if loads]
    return Scenario(declared, [load for loads in pairs.values() for load in loads], rounds=rounds, warmup=warmup,
                    durations=durations, per_model=True)


def targets(cells: Cells) -> list[Compare]:
    """The three targets, on the cells measured in turn when there are some."""
    found = []
    local, served = _best(cells, IN_PROCESS, "resnet50"), _best(cells, "on", "resnet50", "grpc")
    if local and served:
        unpaired = Compare("resnet50 gRPC+batching / in-process best (rows/s)", ("on", served.load),
                           (IN_PROCESS, local.load), SERVED_OVER_IN_PROCESS, metric="rows")
        found.append(Compare(f"resnet50 gRPC+batching c={served.load.concurrency} / in-process "
                             f"b{local.load.batch} (rows/s, measured in turn)", ("on" + PAIRED, served.load),
                             (IN_PROCESS + PAIRED, local.load), SERVED_OVER_IN_PROCESS, "rows", unpaired))
    found.append(Compare("digits gRPC c=32: batching / no batching (req/s)", ("on", FLOOR), ("off", FLOOR),
                         BATCHING_GAIN_SMALL))
    local_1 = Load("digits", "in-process", 1)
    for protocol in ("grpc", "rest"):
        served_1 = Load("digits", protocol, 1)
        unpaired = Compare(f"digits {protocol} c=1 added p50 (server - in-process)", ("off", served_1),
                           (IN_PROCESS, local_1), SERVER_ADDED_P50_MS, metric="p50")
        found.append(Compare(f"digits {protocol} c=1 added p50 (server - in-process, measured in turn)",
                             ("off" + PAIRED, served_1), (IN_PROCESS + PAIRED, local_1), SERVER_ADDED_P50_MS,
                             "p50", unpaired))
    return found


def batching_bound(canned_rps: float, model_rows_per_s: float, no_batching_rps: float) -> tuple[float, float]:
    """The most req/s any batching server could reach here, and that over the no-batching rate.

    At concurrency 32 both cores are busy, so throughput is the machine's CPU
    over the CPU one request costs. A batching server costs per request at
    least what the canned servicer costs (the same client, Python gRPC, and no
    decode, model or encode at all) plus the model's cost per row at its most
    efficient batch size (the in-process best). Adding CPU-seconds per request:
    ``1 / (1 / canned + 1 / model_best)``.
    """
    ideal = 1.0 / (1.0 / canned_rps + 1.0 / model_rows_per_s)
    return ideal, ideal / max(no_batching_rps, 1e-9)


def notes(cells: Cells) -> list[str]:
    """Context for the targets: the bound the gRPC front-end puts on any batching gain."""
    floor, off, best = cells.get(("canned", FLOOR)), cells.get(("off", FLOOR)), _best(cells, IN_PROCESS, "digits")
    if not (floor and off):
        return []
    canned_rps, off_rps = floor.figure("rate"), off.figure("rate")
    lines = [f"NOTE  canned servicer (Python gRPC, no work) / digits no batching, gRPC c=32: "
             f"{canned_rps:.0f} / {off_rps:.0f} = {canned_rps / max(off_rps, 1e-9):.2f}x"]
    if best:
        rows = best.figure("rows")
        ideal, ratio = batching_bound(canned_rps, rows, off_rps)
        lines.append(
            f"NOTE  bound on the digits batching ratio on this machine: a batching server costing only the canned "
            f"servicer's CPU plus the model's best in-process cost per row (b{best.load.batch}, {rows:.0f} rows/s) "
            f"answers at most 1/(1/{canned_rps:.0f} + 1/{rows:.0f}) = {ideal:.0f} req/s = {ratio:.2f}x no batching"
            + (f"; the {BATCHING_GAIN_SMALL}x target is out of reach of any Python gRPC front-end here"
               if ratio < BATCHING_GAIN_SMALL else ""))
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.server", description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="digits,resnet50", help="comma-separated zoo models")
    parser.add_argument("--model-repo", type=Path, default=REPO_ROOT / "models", metavar="DIR",
                        help="model repository; models without a version are exported there first "
                             "(default: <checkout>/models)")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds measured per point (digits)")
    parser.add_argument("--resnet50-duration", type=float, default=8.0,
                        help="seconds measured per point for resnet50 (a batch takes seconds on CPU)")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of load before each window")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated client concurrencies")
    parser.add_argument("--protocols", default="grpc,rest", help="grpc, rest or both")
    parser.add_argument("--batching-config", type=Path, default=None,
                        help="BatchingParameters for the batching run (default: threads = cores, "
                             "batches of at most the rows resnet50 ran fastest at in-process (8 if not measured), "
                             "larger tasks split, timeout 0)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds of without/with batching per point, the first side rotating (pooled)")
    parser.add_argument("--skip-in-process", action="store_true")
    parser.add_argument("--skip-server", action="store_true")
    parser.add_argument("--skip-floor", action="store_true",
                        help="skip the canned gRPC servicer (the front-end's ceiling) at concurrency 32")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT",
                        help="also write every point to OUT in `python -m loadtest compare`'s shape")
    parser.add_argument("--side-by-side-rounds", type=int, default=3,
                        help="rounds of in-process then server, in turn, for the resnet50 and added-latency targets")
    return parser


def _batching(path: Optional[Path], cells: Cells, threads: int) -> BatchingSpec:
    """``--batching-config``'s ``BatchingParameters``, or ``default_batching`` with resnet50's best batch size."""
    if path is not None:
        return text_format.Parse(path.read_text(), batching_parameters_class()())
    best = _best(cells, IN_PROCESS, "resnet50")
    return default_batching(threads, best.load.batch if best else 8)


def main(argv: Optional[Sequence[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s] %(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser().parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    protocols = [p for p in args.protocols.split(",") if p]
    durations = {m: (args.resnet50_duration if m == "resnet50" else args.duration) for m in models}
    repo = args.model_repo.resolve()
    for model in models:   # version 1 of each model without one yet (the exporter's ``ensure``)
        if (exported := ensure_model(model, out=repo)) is not None:
            logger.info("exported %s", exported)
    cores, load_before = len(os.sched_getaffinity(0)), os.getloadavg()[0]
    cells: Cells = {}
    if not args.skip_in_process:
        cells |= runner.run(Scenario([in_process(IN_PROCESS, repo)],
                                     [load for m in models for load in in_process_loads(m, (1, cores))], rounds=1,
                                     durations=durations, per_model=True))
    if not args.skip_server:
        with contextlib.ExitStack() as stack:
            servers = {label: embedded(label, repo, batching=batching, flags=SERVER_FLAGS).start(stack, models)
                       for label, batching in (("off", None), ("on", _batching(args.batching_config, cells, cores)))}
            floor = [] if args.skip_floor else [canned("canned", repo, (FLOOR,))]
            loads = [Load(m, p, int(c)) for m in models for p in protocols for c in args.concurrency.split(",")]
            cells |= runner.run(Scenario([*(running(label, s) for label, s in servers.items()), *floor], loads,
                                         rounds=args.repeats, warmup=args.warmup, durations=durations))
            cells |= runner.run(paired(cells, repo, servers, protocols, args.side_by_side_rounds, args.warmup,
                                       durations))
    print("in-process: load = client threads (c) and rows per call (b); canned: the gRPC front-end's ceiling")
    found = runner.print_report(cells, targets(cells), notes(cells) + [runner.machine_note(
        load_before, "other work on the machine skews absolute numbers; ratios are measured side by side")])
    runner.write_json(args.json, "benchmarks.server", cells)
    return 0 if all(t.passed for t in found) else 1


if __name__ == "__main__":
    sys.exit(main())
