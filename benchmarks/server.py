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
- ``digits``: gRPC at concurrency 32, batching ≥ 3 × no batching;
- ``digits``: p50 at concurrency 1 (server, no batching) minus in-process p50 at batch 1 ≤ 2 ms.

Clients are built to cost the server as little CPU as possible (the machine is
shared): gRPC sends one pre-serialized request through callbacks (no client
threads); REST uses one keep-alive ``http.client`` connection per client thread.

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
import http.client
import json
import logging
import os
import ssl
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence, Union

import grpc
import numpy as np

from benchmarks.loadgen import CannedServer
from exporter.export import ensure_model
from exporter.manifest import load_manifest
from serving import codec, wire
from serving.model_repo import model_versions
from serving.config.files import model_config_text
from serving.server.launcher import REPO_ROOT, ServerProcess
from serving.server.tensorflow.loader import LoaderOptions, SavedModelLoader

__all__ = ["main", "build_parser", "Point", "Target", "measure_in_process", "measure_servers", "points_to_json",
           "print_verdicts", "process_cpu_seconds", "run_grpc", "run_rest"]

logger = logging.getLogger("benchmarks.server")

Side = tuple[str, ServerProcess, int]  # (protocol, server, client concurrency), measured in turn with in-process

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


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used, all threads (``/proc/<pid>/stat``, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_in_process(model: str, version_dir: Path, duration: float, batch_sizes: Sequence[int],
                       thread_counts: Sequence[int]) -> list[Point]:
    """``Servable.run_direct`` at each batch size from 1 and from several threads (``_loaded``)."""
    points = []
    with _loaded(model, version_dir) as call_at:
        for batch in batch_sizes:
            call = call_at(batch)
            for threads in thread_counts:
                latencies, wall = _time_calls(call, duration, threads)
                rows = batch * len(latencies) / wall
                points.append(Point(model, "in-process", f"t{threads}", batch, rows, latencies))
                logger.info("in-process %s batch %d threads %d: %.1f rows/s", model, batch, threads, rows)
    return points


def _time_calls(call: Callable[[], object], duration: float, threads: int,
                min_calls: int = 2) -> tuple[list[float], float]:
    """Call ``call`` in a loop on ``threads`` threads for ``duration`` s; latencies and wall time."""
    latencies: list[float] = []
    lock = threading.Lock()
    begin = time.perf_counter()
    deadline = begin + duration

    def loop() -> None:
        mine: list[float] = []
        while time.perf_counter() < deadline or len(mine) < min_calls:
            start = time.perf_counter()
            call()
            mine.append(time.perf_counter() - start)
        with lock:
            latencies.extend(mine)

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return latencies, time.perf_counter() - begin


# ---------------------------------------------------------------------------- clients

def run_grpc(target: str, payload: bytes, concurrency: int, warmup: float, duration: float, *,
             credentials: Optional[grpc.ChannelCredentials] = None,
             metadata: Sequence[tuple[str, str]] = ()) -> tuple[list, int]:
    """Closed loop: ``concurrency`` calls in flight, each completion sends the next one.

    Returns latencies of calls that completed inside the measured window, and the error count.
    ``credentials`` makes the channel TLS; ``metadata`` goes with every call (an API key).
    """
    options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
    channel = (grpc.secure_channel(target, credentials, options) if credentials is not None
               else grpc.insecure_channel(target, options=options))
    call = channel.unary_unary(wire.PREDICT)  # bytes in, bytes out: no client-side (de)serialization
    begin = time.perf_counter()
    window = (begin + warmup, begin + warmup + duration)
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    finished = threading.Event()
    in_flight = [concurrency]

    def send() -> None:
        start = time.perf_counter()
        call.future(payload, timeout=120, metadata=metadata or None).add_done_callback(lambda f: done(f, start))

    def done(future, start: float) -> None:
        end = time.perf_counter()
        failed = future.exception() is not None
        with lock:
            if failed:
                errors[0] += 1
            elif window[0] <= end <= window[1]:
                latencies.append(end - start)
            if end >= window[1]:
                in_flight[0] -= 1
                if not in_flight[0]:
                    finished.set()
                return
        send()

    for _ in range(concurrency):
        send()
    finished.wait(warmup + duration + 300)
    channel.close()
    return latencies, errors[0]


def run_rest(base_url: str, model: str, body: bytes, concurrency: int, warmup: float,
             duration: float, *, ssl_context: Optional[ssl.SSLContext] = None,
             headers: Optional[dict[str, str]] = None) -> tuple[list, int]:
    """Closed loop over ``concurrency`` threads, each with one keep-alive connection.

    ``ssl_context`` makes the connections HTTPS; ``headers`` go with every request (an API key).
    """
    host, port = base_url.split("//")[1].split(":")
    sent = {"Content-Type": "application/json", **(headers or {})}

    def connect() -> http.client.HTTPConnection:
        if ssl_context is not None:
            return http.client.HTTPSConnection(host, int(port), timeout=120, context=ssl_context)
        return http.client.HTTPConnection(host, int(port), timeout=120)
    begin = time.perf_counter()
    window = (begin + warmup, begin + warmup + duration)
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    path = f"/v1/models/{model}:predict"

    def client() -> None:
        connection = connect()
        try:
            while True:
                start = time.perf_counter()
                try:
                    connection.request("POST", path, body, sent)
                    response = connection.getresponse()
                    response.read()
                    ok = response.status == 200
                except (OSError, http.client.HTTPException):
                    ok = False
                    connection.close()
                    connection = connect()
                end = time.perf_counter()
                with lock:
                    if not ok:
                        errors[0] += 1
                    elif window[0] <= end <= window[1]:
                        latencies.append(end - start)
                if end >= window[1]:
                    return
        finally:
            connection.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(warmup + duration + 300)
    return latencies, errors[0]


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
            inputs = load_manifest(_version_dir(repo, model)).sample_inputs(batch_size=1)
            grpc_payload = codec.encode_predict_request(model, inputs, signature_name=codec.DEFAULT_SIGNATURE)
            rest_body = codec.inputs_to_rest_request(inputs)
            for server in servers.values():
                _check_answers(server, model, grpc_payload, rest_body)
            for protocol in protocols:
                for concurrency in concurrencies:
                    sides = dict(servers)
                    if canned and model == "digits" and protocol == "grpc" and concurrency == 32:
                        sides["canned"] = canned
                    runs: dict = {label: ([], 0) for label in sides}
                    for _ in range(repeats):
                        for label, server in sides.items():
                            latencies, errors = _load(server, protocol, model, grpc_payload, rest_body,
                                                      concurrency, warmup, durations[model])
                            runs[label] = (runs[label][0] + latencies, runs[label][1] + errors)
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
                points += measure_side_by_side(model, _version_dir(repo, model), local, sides, grpc_payload,
                                               rest_body, warmup, durations[model], rounds)
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


def measure_side_by_side(model: str, version_dir: Path, local: Point, sides: Sequence[Side],
                         grpc_payload: bytes, rest_body: bytes, warmup: float, duration: float,
                         rounds: int) -> list[Point]:
    """In-process at ``local``'s batch size and threads, then each ``(protocol, server, concurrency)``.

    The in-process and server figures above are taken minutes apart, and a shared
    2-core machine changes speed by tens of percent in that time; this measures
    them in turn within seconds, ``rounds`` times. Returns one point per side,
    labelled ``paired``, pooled over the rounds.
    """
    threads = int(local.batching.lstrip("t"))
    calls: list[float] = []
    served: list[list[float]] = [[] for _ in sides]
    local_wall = 0.0
    with _loaded(model, version_dir) as call_at:
        call = call_at(local.load)
        for _ in range(rounds):
            latencies, wall = _time_calls(call, duration, threads)
            calls += latencies
            local_wall += wall
            for index, (protocol, server, concurrency) in enumerate(sides):
                served[index] += _load(server, protocol, model, grpc_payload, rest_body, concurrency,
                                       warmup, duration)[0]
    pair = [Point(model, "in-process", "paired", local.load, local.load * len(calls) / local_wall, calls)]
    pair += [Point(model, protocol, "paired", concurrency, len(latencies) / (duration * rounds), latencies)
             for (protocol, _, concurrency), latencies in zip(sides, served)]
    for point in pair:
        logger.info("%s %s paired load %d: %.1f rows/s p50 %.2f ms", model, point.path, point.load,
                    point.rows_per_s, point.percentile(50) * 1e3)
    return pair


def _load(server: Union[ServerProcess, "_Canned"], protocol: str, model: str, grpc_payload: bytes,
          rest_body: bytes, concurrency: int, warmup: float, duration: float) -> tuple[list, int]:
    if protocol == "grpc":
        return run_grpc(server.grpc_target, grpc_payload, concurrency, warmup, duration)
    return run_rest(server.rest_url, model, rest_body, concurrency, warmup, duration)


class _Canned:
    """The canned servicer's address, shaped like a ``ServerProcess`` for ``_load``."""

    def __init__(self, port: int) -> None:
        self.grpc_target = f"127.0.0.1:{port}"


def _canned_target(stack: contextlib.ExitStack) -> _Canned:
    """A gRPC servicer that answers every Predict with canned bytes (``benchmarks.loadgen``):
    the same client and payload against it give the most requests/s any Python gRPC
    front-end reaches on this machine, hence a ceiling on any batching gain."""
    canned = stack.enter_context(CannedServer(set(os.sched_getaffinity(0))))
    return _Canned(canned.port)


def _check_answers(server: ServerProcess, model: str, grpc_payload: bytes, rest_body: bytes) -> None:
    """One real, decoded answer over each protocol before anything is timed."""
    with grpc.insecure_channel(server.grpc_target) as channel:
        raw = channel.unary_unary(wire.PREDICT)(grpc_payload, timeout=120)
    if not codec.decode_predict_response(raw):
        raise RuntimeError(f"{model}: gRPC Predict returned no outputs")
    host, port = server.rest_url.split("//")[1].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    connection.request("POST", f"/v1/models/{model}:predict", rest_body, {"Content-Type": "application/json"})
    answer = connection.getresponse()
    text = answer.read()
    connection.close()
    if answer.status != 200 or b"predictions" not in text:
        raise RuntimeError(f"{model}: REST predict answered {answer.status}: {text[:200]!r}")


# ---------------------------------------------------------------------------- report

@dataclass
class Target:
    name: str
    ratio: float
    limit: float
    higher_is_better: bool = True
    unit: str = "x"

    @property
    def passed(self) -> bool:
        if np.isnan(self.ratio):
            return False
        return self.ratio >= self.limit if self.higher_is_better else self.ratio <= self.limit

    def verdict(self) -> str:
        """``PASS  name: ratio (target >= limit)``, or FAIL."""
        sign = ">=" if self.higher_is_better else "<="
        return (f"{'PASS' if self.passed else 'FAIL'}  {self.name}: {self.ratio:.2f}{self.unit} "
                f"(target {sign} {self.limit}{self.unit})")


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
                              on[0].rows_per_s / max(off[0].rows_per_s, 1e-9), 3.0))
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
            + ("; the 3x target is out of reach of any Python gRPC front-end here" if ratio < 3.0 else ""))
    return lines


def print_verdicts(targets: Sequence[Target], remarks: Sequence[str] = ()) -> None:
    """A blank line, one PASS/FAIL line per target, then the remarks."""
    print()
    for t in targets:
        print(t.verdict())
    for remark in remarks:
        print(remark)


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


def _version_dir(repo: Path, model: str) -> Path:
    """The newest version of ``model`` in ``repo``: the one the server serves by default."""
    return repo / model / str(max(model_versions(repo / model)))


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
                points += measure_in_process(model, _version_dir(repo, model), durations[model],
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
