"""The embedded server against the model run in-process: one run, side by side, with ratios.

Measured, in this order, in one invocation:

1. in-process: each model loaded exactly as the server loads it
   (``SavedModelLoader``), ``Servable.run_direct`` timed at several batch
   sizes from 1 thread and from one thread per core — the ceiling for the
   server's throughput, and the floor for its latency;
2. two embedded servers (``python -m serving.server``), up at the same time:
   one without batching, one with ``--enable_batching
   --batching_parameters_file=...``; closed-loop clients over gRPC and REST at
   each concurrency (one row per request), each point measured on one server
   then the other (``--repeats`` times), so the shared machine's changing load
   hits both sides alike;
3. beside digits over gRPC at concurrency 32, a canned gRPC servicer
   (``benchmarks.loadgen``) that answers without any work, same client and
   payload: the most requests/s any Python gRPC front-end reaches here. With the
   model's best in-process cost per row added, it bounds what any batching server
   could reach here (``batching_bound``), and so the batching ratio.

Then it prints the table and PASS/FAIL per target:

- ``resnet50``: gRPC with batching at its best concurrency ≥ 0.9 × in-process at its best batch size,
  the two measured in turn (``--side-by-side-rounds``) so the machine's drift hits both;
- ``digits``: gRPC at concurrency 32, batching ≥ ``BATCHING_GAIN_SMALL`` × no batching
  (``benchmarks.targets``: batching never costs);
- ``digits``: p50 at concurrency 1 (server, no batching) minus in-process p50 at batch 1 ≤ 2 ms.

Clients are ``loadtest.driver``'s closed loop, built to cost as little CPU as possible
(the machine is shared): one pre-serialized gRPC request on a bytes-in/bytes-out stub,
or one keep-alive ``http.client`` connection, per client thread.

    python -m benchmarks.server                                   # digits and resnet50
    python -m benchmarks.server --models digits --duration 2
    python -m benchmarks.server --model-repo models --batching-config serving/batching.cpu.config

``--model-repo`` defaults to ``<checkout>/models``; a model without a version
there is exported first (version 1, the exporter's ``ensure``). The servers
are started with ``serving.server.launcher``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import numpy as np

from benchmarks.loadgen import CannedServer
from benchmarks.scenario import Endpoint, Payloads, predict_load, predict_transport, version_dir
from benchmarks.targets import BATCHING_GAIN_SMALL, Target, print_verdicts
from exporter.export import ensure_model
from exporter.manifest import load_manifest
from loadtest.driver import call_transport, measure
from serving import codec
from serving.config.files import model_config_text
from serving.server.launcher import REPO_ROOT, ServerProcess
from serving.server.tensorflow.loader import LoaderOptions, SavedModelLoader

__all__ = ["main", "build_parser", "Point", "measure_in_process", "measure_servers", "points_to_json"]

logger = logging.getLogger("benchmarks.server")

Side = tuple[str, Endpoint, int]  # (protocol, server, client concurrency), measured in turn with in-process

IN_PROCESS_BATCH_SIZES = {"digits": (1, 8, 32, 128), "resnet50": (1, 4, 16)}
DEFAULT_BATCHING = """\
# benchmarks/server.py default, after TF Serving's CPU advice (batching/README.md):
# threads = cores, no timeout, a generous queue while measuring. Batches run at
# most the batch size resnet50 ran fastest at in-process in this run (on CPU a
# larger batch is slower per row: on 2 cores batch 16 runs fewer rows/s than 4).
# Tasks up to 64 rows are accepted and split, so the exporter's warmup requests
# (batch sizes up to 64, from serving/batching.config) still load.
max_batch_size { value: 64 }
enable_large_batch_splitting { value: true }
max_execution_batch_size { value: %(rows)d }
batch_timeout_micros { value: 0 }
max_enqueued_batches { value: 1000 }
num_batch_threads { value: %(threads)d }
"""


@dataclass
class Point:
    """One measurement: rows/s and per-call latency percentiles (seconds)."""

    model: str
    path: str            # "in-process", "grpc", "rest"
    batching: str        # "-", "off", "on"
    load: int            # batch size (in-process) or concurrency (server)
    rows_per_s: float
    latencies: list[float] = field(repr=False, default_factory=list)
    errors: int = 0

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        return float(np.percentile(self.latencies, q))


# ---------------------------------------------------------------------------- in-process

@contextlib.contextmanager
def _loaded(model: str, version_dir: Path) -> Iterator[Callable[[int], Callable[[], object]]]:
    """The model loaded exactly as the server loads it (``SavedModelLoader``, same session
    options); yields ``call_at(batch)``: a warmed-up ``Servable.run_direct`` on manifest inputs."""
    manifest = load_manifest(version_dir)
    servable = SavedModelLoader(LoaderOptions(enable_model_warmup=False)).load(
        model, int(version_dir.name), str(version_dir))
    outputs = list(servable.signatures[codec.DEFAULT_SIGNATURE].outputs)

    def call_at(batch: int) -> Callable[[], object]:
        inputs = manifest.sample_inputs(batch_size=batch)

        def call() -> object:
            return servable.run_direct(codec.DEFAULT_SIGNATURE, inputs, outputs)

        for _ in range(2):  # build the callable, touch the kernels
            call()
        return call

    try:
        yield call_at
    finally:
        servable.close()


def measure_in_process(model: str, version_dir: Path, duration: float, batch_sizes: Sequence[int],
                       thread_counts: Sequence[int]) -> list[Point]:
    """``Servable.run_direct`` at each batch size from 1 and from several threads (``_loaded``)."""
    points = []
    with _loaded(model, version_dir) as call_at:
        for batch in batch_sizes:
            call = call_at(batch)
            for threads in thread_counts:
                window = measure(call_transport(call), threads, 0.0, duration)
                rows = batch * window.requests / window.seconds
                points.append(Point(model, "in-process", f"t{threads}", batch, rows, window.latencies))
                logger.info("in-process %s batch %d threads %d: %.1f rows/s", model, batch, threads, rows)
    return points


# ---------------------------------------------------------------------------- the server

def _model_config(repo: Path, models: Sequence[str], directory: Path) -> Path:
    path = directory / "models.config"
    path.write_text(model_config_text({m: (repo / m).resolve() for m in models}))
    return path


def measure_servers(repo: Path, models: Sequence[str], batching_file: Path, durations: dict,
                    concurrencies: Sequence[int], protocols: Sequence[str], warmup: float, repeats: int,
                    floor: bool, workdir: Path, in_process: Sequence[Point] = (),
                    side_by_side: Sequence[str] = (), rounds: int = 3) -> list[Point]:
    """Two embedded servers, without and with batching, up at the same time; every
    (model, protocol, concurrency) is measured on one then the other, ``repeats`` times,
    so a change in the shared machine's load hits both sides alike. With ``floor``, the
    canned servicer (``_canned_target``) is measured beside digits over gRPC at c=32.
    For each model in ``side_by_side``, what its target compares (``_pairing``) is then
    measured again in turn, ``rounds`` times (``measure_side_by_side``)."""
    base = [f"--model_config_file={_model_config(repo, models, workdir)}", "--file_system_poll_wait_seconds=0"]
    variants = {"off": base, "on": base + ["--enable_batching", f"--batching_parameters_file={batching_file}"]}
    points = []
    with contextlib.ExitStack() as stack:
        servers = {label: stack.enter_context(ServerProcess(
            args, wait_for=models, log_path=workdir / f"server-batching-{label}.log", timeout=900))
            for label, args in variants.items()}
        canned = _canned_target(stack) if floor and "digits" in models and "grpc" in protocols else None
        for model in models:
            payloads = Payloads.of(repo, model)
            for server in servers.values():
                _check_answers(server, payloads)
            for protocol in protocols:
                for concurrency in concurrencies:
                    sides = dict(servers)
                    if canned and model == "digits" and protocol == "grpc" and concurrency == 32:
                        sides["canned"] = canned
                    runs: dict = {label: ([], 0) for label in sides}
                    for _ in range(repeats):
                        for label, server in sides.items():
                            window = predict_load(server, protocol, payloads, concurrency, warmup, durations[model])
                            runs[label] = (runs[label][0] + window.latencies, runs[label][1] + window.errors)
                    for label, (latencies, errors) in runs.items():
                        name, batching = ("canned", "-") if label == "canned" else (model, label)
                        point = Point(name, protocol, batching, concurrency,
                                      len(latencies) / (durations[model] * repeats), latencies, errors)
                        logger.info("%s %s batching=%s c=%d: %.1f req/s p50 %.2f ms errors %d", name, protocol,
                                    batching, concurrency, point.rows_per_s, point.percentile(50) * 1e3, errors)
                        points.append(point)
            pairing = _pairing(model, in_process, points, servers, protocols) if model in side_by_side else None
            if pairing is not None:
                local, sides = pairing
                points += measure_side_by_side(model, version_dir(repo, model), local, sides, warmup,
                                               durations[model], rounds)
    return points


def _pairing(model: str, in_process: Sequence[Point], points: Sequence[Point], servers: dict[str, ServerProcess],
             protocols: Sequence[str]) -> Optional[tuple[Point, list[Side]]]:
    """What a target compares, to measure again in turn: the in-process point and the server sides.

    resnet50: in-process at its best batch size against gRPC with batching at its best
    concurrency. digits: in-process batch 1 on one thread against each protocol without
    batching at concurrency 1 (the added-latency target).
    """
    if model == "resnet50":
        local = _find(in_process, model=model)
        served = _find(points, model=model, path="grpc", batching="on")
        if not (local and served):
            return None
        best = max(served, key=lambda p: p.rows_per_s)
        return max(local, key=lambda p: p.rows_per_s), [("grpc", servers["on"], best.load)]
    local = _find(in_process, model=model, batching="t1", load=1)
    if not local:
        return None
    return local[0], [(protocol, servers["off"], 1) for protocol in protocols]


def measure_side_by_side(model: str, version_dir: Path, local: Point, sides: Sequence[Side], warmup: float,
                         duration: float, rounds: int) -> list[Point]:
    """In-process at ``local``'s batch size and threads, then each ``(protocol, server, concurrency)``.

    The in-process and server figures above are taken minutes apart, and a shared
    2-core machine changes speed by tens of percent in that time; this measures
    them in turn within seconds, ``rounds`` times. Returns one point per side,
    labelled ``paired``, pooled over the rounds.
    """
    threads = int(local.batching.lstrip("t"))
    payloads = Payloads.of(version_dir.parent.parent, model)
    calls: list[float] = []
    served: list[list[float]] = [[] for _ in sides]
    local_wall = 0.0
    with _loaded(model, version_dir) as call_at:
        call = call_at(local.load)
        for _ in range(rounds):
            window = measure(call_transport(call), threads, 0.0, duration)
            calls += window.latencies
            local_wall += window.seconds
            for index, (protocol, server, concurrency) in enumerate(sides):
                served[index] += predict_load(server, protocol, payloads, concurrency, warmup, duration).latencies
    pair = [Point(model, "in-process", "paired", local.load, local.load * len(calls) / local_wall, calls)]
    pair += [Point(model, protocol, "paired", concurrency, len(latencies) / (duration * rounds), latencies)
             for (protocol, _, concurrency), latencies in zip(sides, served)]
    for point in pair:
        logger.info("%s %s paired load %d: %.1f rows/s p50 %.2f ms", model, point.path, point.load,
                    point.rows_per_s, point.percentile(50) * 1e3)
    return pair


@dataclass(frozen=True)
class _Canned:
    """The canned servicer's address, an ``Endpoint`` like a ``ServerProcess`` (gRPC only)."""

    grpc_target: str
    rest_url: str = ""


def _canned_target(stack: contextlib.ExitStack) -> _Canned:
    """A gRPC servicer that answers every Predict with canned bytes (``benchmarks.loadgen``):
    the same client and payload against it give the most requests/s any Python gRPC
    front-end reaches on this machine, hence a ceiling on any batching gain."""
    canned = stack.enter_context(CannedServer(set(os.sched_getaffinity(0))))
    return _Canned(f"127.0.0.1:{canned.port}")


def _check_answers(server: ServerProcess, payloads: Payloads) -> None:
    """One real, decoded answer over each protocol before anything is timed."""
    for protocol, address in (("grpc", server.grpc_target), ("rest", server.rest_url)):
        connection = predict_transport(protocol, address, payloads)()
        try:
            answer = connection.send()
        finally:
            connection.close()
        outputs = (codec.decode_predict_response(answer) if protocol == "grpc"
                   else codec.rest_response_to_outputs(answer))
        if not outputs:
            raise RuntimeError(f"{payloads.model}: {protocol} Predict returned no outputs")


# ---------------------------------------------------------------------------- report

def _find(points: Sequence[Point], **match) -> list[Point]:
    return [p for p in points if all(getattr(p, k) == v for k, v in match.items())]


def evaluate(points: Sequence[Point]) -> list[Target]:
    """The three targets, from whatever points were measured."""
    targets = []
    in_process_best = {p.model: max(q.rows_per_s for q in _find(points, model=p.model, path="in-process"))
                       for p in _find(points, path="in-process") if p.batching != "paired"}
    paired = {p.path: p for p in _find(points, model="resnet50", batching="paired")}
    served = _find(points, model="resnet50", path="grpc", batching="on")
    if len(paired) == 2:
        targets.append(Target(f"resnet50 gRPC+batching c={paired['grpc'].load} / in-process b"
                              f"{paired['in-process'].load} (rows/s, measured in turn)",
                              paired["grpc"].rows_per_s / paired["in-process"].rows_per_s, 0.9))
    elif served and "resnet50" in in_process_best:
        best = max(p.rows_per_s for p in served)
        targets.append(Target("resnet50 gRPC+batching / in-process best (rows/s)",
                              best / in_process_best["resnet50"], 0.9))
    on, off = _find(points, model="digits", path="grpc", batching="on", load=32), \
        _find(points, model="digits", path="grpc", batching="off", load=32)
    if on and off:
        targets.append(Target("digits gRPC c=32: batching / no batching (req/s)",
                              on[0].rows_per_s / max(off[0].rows_per_s, 1e-9), BATCHING_GAIN_SMALL))
    for protocol in ("grpc", "rest"):
        local = _find(points, model="digits", path="in-process", batching="paired", load=1)
        served = _find(points, model="digits", path=protocol, batching="paired", load=1)
        name = f"digits {protocol} c=1 added p50 (server - in-process, measured in turn)"
        if not (local and served):
            local = _find(points, model="digits", path="in-process", batching="t1", load=1)
            served = _find(points, model="digits", path=protocol, batching="off", load=1)
            name = f"digits {protocol} c=1 added p50 (server - in-process)"
        if local and served:
            added_ms = (served[0].percentile(50) - local[0].percentile(50)) * 1e3
            targets.append(Target(name, added_ms, 2.0, higher_is_better=False, unit=" ms"))
    return targets


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


def notes(points: Sequence[Point]) -> list[str]:
    """Context for the targets: the bound the gRPC front-end puts on any batching gain."""
    canned = _find(points, model="canned", load=32)
    off = _find(points, model="digits", path="grpc", batching="off", load=32)
    local = [p for p in _find(points, model="digits", path="in-process") if p.batching != "paired"]
    if not (canned and off):
        return []
    lines = [f"NOTE  canned servicer (Python gRPC, no work) / digits no batching, gRPC c=32: "
             f"{canned[0].rows_per_s:.0f} / {off[0].rows_per_s:.0f} = "
             f"{canned[0].rows_per_s / max(off[0].rows_per_s, 1e-9):.2f}x"]
    if local:
        best = max(local, key=lambda p: p.rows_per_s)
        ideal, ratio = batching_bound(canned[0].rows_per_s, best.rows_per_s, off[0].rows_per_s)
        lines.append(
            f"NOTE  bound on the digits batching ratio on this machine: a batching server costing only the canned "
            f"servicer's CPU plus the model's best in-process cost per row (b{best.load}, "
            f"{best.rows_per_s:.0f} rows/s) answers at most 1/(1/{canned[0].rows_per_s:.0f} + "
            f"1/{best.rows_per_s:.0f}) = {ideal:.0f} req/s = {ratio:.2f}x no batching"
            + (f"; the {BATCHING_GAIN_SMALL}x target is out of reach of any Python gRPC front-end here"
               if ratio < BATCHING_GAIN_SMALL else ""))
    return lines


def print_report(points: Sequence[Point], targets: Sequence[Target], remarks: Sequence[str] = ()) -> None:
    header = f"{'model':<10} {'path':<11} {'batching':<8} {'load':>5} {'rows/s':>10} {'p50 ms':>9} " \
             f"{'p99 ms':>9} {'calls':>7} {'errors':>6}"
    print("in-process: 'batching' column = caller threads; load = rows per call (b) or client concurrency (c)")
    print(header)
    print("-" * len(header))
    for p in points:
        load = f"b{p.load}" if p.path == "in-process" else f"c{p.load}"
        print(f"{p.model:<10} {p.path:<11} {p.batching:<8} {load:>5} {p.rows_per_s:>10.1f} "
              f"{p.percentile(50) * 1e3:>9.2f} {p.percentile(99) * 1e3:>9.2f} {len(p.latencies):>7} "
              f"{p.errors:>6}")
    print_verdicts(targets, remarks)


# ---------------------------------------------------------------------------- main

def points_to_json(points: Sequence[Point]) -> dict:
    """The points in ``python -m loadtest compare``'s generic shape: one series per model, path and batching,
    one level per load (``b8``: rows per call in-process, ``c8``: client concurrency), repeated points as rounds."""
    series: dict[str, dict[str, list[dict]]] = {}
    for p in points:
        label = f"{p.model}/{p.path}/{p.batching}"
        level = f"{'b' if p.path == 'in-process' else 'c'}{p.load}"
        series.setdefault(label, {}).setdefault(level, []).append(
            {"throughput_rps": p.rows_per_s, "p50_ms": p.percentile(50) * 1e3, "p99_ms": p.percentile(99) * 1e3,
             "errors": p.errors})
    return {"kind": "benchmark", "benchmark": "benchmarks.server",
            "series": [{"label": label, "levels": [
                {"level": level, **{k: float(np.mean([r[k] for r in rounds])) for k in ("throughput_rps", "p50_ms",
                                                                                       "p99_ms")},
                 "errors": sum(r["errors"] for r in rounds), "rounds": rounds}
                for level, rounds in levels.items()]} for label, levels in series.items()]}


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
                        help="alternate without/with batching this many times per point (pooled)")
    parser.add_argument("--skip-in-process", action="store_true")
    parser.add_argument("--skip-server", action="store_true")
    parser.add_argument("--skip-floor", action="store_true",
                        help="skip the canned gRPC servicer (the front-end's ceiling) at concurrency 32")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT",
                        help="also write every point to OUT in `python -m loadtest compare`'s shape")
    parser.add_argument("--side-by-side-rounds", type=int, default=3,
                        help="rounds of in-process then server, in turn, for the resnet50 and added-latency targets")
    return parser


def _execution_rows(points: Sequence[Point], model: str = "resnet50", default: int = 8) -> int:
    """The batch size ``model`` ran the most rows/s at in-process (``default`` if not measured)."""
    local = _find(points, model=model, path="in-process")
    return max(local, key=lambda p: p.rows_per_s).load if local else default


def _ensure_models(repo: Path, models: Sequence[str]) -> None:
    """Export version 1 of each model that has no version in ``repo`` yet (the exporter's ``ensure``)."""
    for model in models:
        exported = ensure_model(model, out=repo)
        if exported is not None:
            logger.info("exported %s", exported)




def main(argv: Optional[Sequence[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s] %(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser().parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    protocols = [p for p in args.protocols.split(",") if p]
    durations = {m: (args.resnet50_duration if m == "resnet50" else args.duration) for m in models}
    repo = args.model_repo.resolve()
    _ensure_models(repo, models)
    cores = len(os.sched_getaffinity(0))
    load_before = os.getloadavg()
    logger.info("models %s from %s; load average %s", models, repo, load_before)
    points: list[Point] = []
    with tempfile.TemporaryDirectory(prefix="bench-server-") as tmp:
        workdir = Path(tmp)
        if not args.skip_in_process:
            for model in models:
                points += measure_in_process(model, version_dir(repo, model), durations[model],
                                             IN_PROCESS_BATCH_SIZES.get(model, (1, 8, 32)), (1, cores))
        if not args.skip_server:
            batching_file = args.batching_config
            if batching_file is None:
                batching_file = workdir / "batching.config"
                batching_file.write_text(DEFAULT_BATCHING % {"threads": cores, "rows": _execution_rows(points)})
            points += measure_servers(repo, models, batching_file, durations, concurrencies, protocols,
                                      args.warmup, args.repeats, not args.skip_floor, workdir,
                                      in_process=points, side_by_side=("resnet50", "digits"),
                                      rounds=args.side_by_side_rounds)
    load_after = os.getloadavg()
    targets = evaluate(points)
    remarks = notes(points) + [f"NOTE  {len(os.sched_getaffinity(0))} cores; 1-min load average {load_before[0]:.1f} "
                               f"at the start, {load_after[0]:.1f} at the end (other work on the machine skews "
                               f"absolute numbers; ratios are measured side by side)"]
    print_report(points, targets, remarks)
    if args.json is not None:
        args.json.write_text(json.dumps(points_to_json(points), indent=2))
        print(f"wrote {args.json}")
    return 0 if all(t.passed for t in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
