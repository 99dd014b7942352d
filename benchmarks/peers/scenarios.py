"""The peers scenario: servers x loads, one round at a time, into ``Measurements``.

Servers: the embedded server without and with batching, each peer of ``envs.PEERS`` and TF
Serving in Docker, each started, timed and stopped in a round (the order rotates per round),
and the in-process ceiling. Loads, all through ``loadtest.driver``'s closed loop: raw REST
(one keep-alive connection per client, the same for every server) at c=1 and the model's high
concurrency, raw gRPC on the embedded server, and the SDK's ``GrpcClient`` / ``RestClient``
(one client shared by every thread, as documented) on the embedded server for ``SDK_MODELS``.
"""
from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from google.protobuf import text_format
from google.protobuf.message import Message

from benchmarks.peers.measurements import Measurements, Point
from benchmarks.peers.processes import answers_agree, launch_peer, wait_for_answer
from benchmarks.peers.envs import PeerUnavailable
from benchmarks.scenario import Payloads, predict_transport, version_dir
from benchmarks.server import measure_in_process
from exporter.manifest import load_manifest
from loadtest.driver import Transport, call_transport, measure
from loadtest.procfs import tree_rss_anon_mb, tree_rss_mb
from serving.client import GrpcClient, RestClient
from serving.config.protos import batching_parameters_class
from serving.launcher import ServerProcess

__all__ = ["HIGH_CONCURRENCY", "LARGE_MODELS", "SDK_MODELS", "TODAY_RESNET50_REST_C1", "Bench", "batching_proto",
           "measure_point", "run_round"]

logger = logging.getLogger("benchmarks.peers")

# The "today" baseline of the resnet50 REST target: the resnet50 table's "embedded, REST" c=1 =
# 3.3 req/s, measured before the REST work (gc.freeze, JSON straight into numpy) on the 2-core
# development machine. A constant on purpose: the target is "2x what it was".
TODAY_RESNET50_REST_C1 = 3.3

HIGH_CONCURRENCY = {"digits": 32, "resnet50": 8}   # a model not listed: 32
LARGE_MODELS = ("resnet50",)      # measured with --resnet50-duration
SDK_MODELS = ("digits",)          # where the SDK's GrpcClient and RestClient are compared


@dataclass
class Bench:
    """What a run measures, and where its measurements go."""

    repo: Path
    models: Sequence[str]
    peers: Sequence[str]
    batching_file: Path
    warmups: Mapping[str, float]
    durations: Mapping[str, float]
    workdir: Path
    measurements: Measurements
    references: dict[str, bytes]

    def skip(self, name: str, reason: str) -> None:
        if name not in self.measurements.skipped:
            print(f"SKIP {name}: {reason}", flush=True)
            self.measurements.skipped[name] = reason


def batching_proto(path: Path) -> Message:
    return text_format.Parse(path.read_text(), batching_parameters_class()())


def measure_point(pid: Optional[int], transport: Transport, concurrency: int, warmup: float,
                  duration: float) -> Point:
    """One closed-loop window: req/s, p50/p99 ms and the server tree's CPU-ms per request (``pid`` given)."""
    window = measure(transport, concurrency, warmup, duration, server_pid=pid)
    ms = [None if window.requests == 0 else window.percentile(q) * 1e3 for q in (50, 99)]
    return Point(window.rate, ms[0], ms[1], window.ms_per_request(window.server_cpu), window.requests,
                 window.errors)


def run_round(bench: Bench, round_index: int) -> None:
    """Every server of every model once (started, timed, stopped), in an order that rotates per round."""
    for model in bench.models:
        payloads = Payloads.of(bench.repo, model)
        servers = ["embedded", "embedded+batching", *bench.peers]
        shift = round_index % len(servers)
        for server in servers[shift:] + servers[:shift]:
            try:
                if server.startswith("embedded"):
                    _time_embedded(bench, payloads, batching=server != "embedded")
                else:
                    _time_peer(bench, payloads, server)
            except (RuntimeError, TimeoutError, PeerUnavailable) as error:
                bench.skip(f"{server}/{model}", str(error))
        _time_in_process(bench, model)


def _time_embedded(bench: Bench, payloads: Payloads, batching: bool) -> None:
    model = payloads.model
    label = "embedded+batching" if batching else "embedded"
    server = ServerProcess.for_models({model: bench.repo / model}, workdir=bench.workdir / f"{label}-{model}",
                                      batching=batching_proto(bench.batching_file) if batching else None,
                                      extra_flags=["--file_system_poll_wait_seconds=0"], timeout=900)
    began = time.perf_counter()
    server.launch()
    record = bench.measurements.server(model, label)
    try:
        answer = wait_for_answer(server.rest_url, model, payloads.rest, 900, server.running)
        record.cold_start_s.append(time.perf_counter() - began)
        server.wait_ready()
        bench.references.setdefault(model, answer)
        _time_points(bench, model, label, server.pid, {
            "rest": predict_transport("rest", server.rest_url, payloads),
            "grpc": predict_transport("grpc", server.grpc_target, payloads)})
        if not batching and model in SDK_MODELS:
            high = HIGH_CONCURRENCY.get(model, 32)
            with GrpcClient(server.grpc_target) as grpc_client, RestClient(server.rest_url) as rest_client:
                for name, client in (("sdk-grpc", grpc_client), ("sdk-rest", rest_client)):
                    sdk = call_transport(functools.partial(client.predict, model, payloads.inputs))
                    point = measure_point(server.pid, sdk, high, bench.warmups[model], bench.durations[model])
                    record.points.setdefault(f"{name} c={high}", []).append(point)
    except (RuntimeError, TimeoutError) as error:
        raise RuntimeError(f"{error}\n--- log tail ---\n{server.log_tail(15)}") from None
    finally:
        server.stop()


def _time_peer(bench: Bench, payloads: Payloads, name: str) -> None:
    model = payloads.model
    directory = version_dir(bench.repo, model)
    peer, own_tree = launch_peer(name, model, directory, bench.workdir)
    try:
        answer = wait_for_answer(peer.rest_url, model, payloads.rest, 600, peer.running)
        bench.measurements.server(model, name).cold_start_s.append(time.perf_counter() - peer.launched_at)
        reference = bench.references.get(model)
        if reference is not None:
            tolerance = load_manifest(directory).tolerance
            differs = answers_agree(reference, answer, tolerance.get("atol", 1e-5), tolerance.get("rtol", 1e-4))
            if differs:
                raise RuntimeError(f"answer differs from the embedded server's: {differs}")
        _time_points(bench, model, name, peer.pid if own_tree else None,
                     {"rest": predict_transport("rest", peer.rest_url, payloads)})
    except (RuntimeError, TimeoutError) as error:
        raise RuntimeError(f"{error}\n--- log tail ---\n{peer.log_tail()}") from None
    finally:
        peer.stop()


def _time_points(bench: Bench, model: str, label: str, pid: Optional[int], loads: Mapping[str, Transport]) -> None:
    """c=1 and the model's high concurrency over each protocol; RSS after the first point (the warmup)."""
    high = HIGH_CONCURRENCY.get(model, 32)
    record = bench.measurements.server(model, label)
    points = [(protocol, transport, concurrency) for protocol, transport in loads.items() for concurrency in (1, high)]
    for index, (protocol, transport, concurrency) in enumerate(points):
        point = measure_point(pid, transport, concurrency, bench.warmups[model], bench.durations[model])
        record.points.setdefault(f"{protocol} c={concurrency}", []).append(point)
        logger.info("%s %s %s c=%d: %.1f req/s, p50 %s ms, %s CPU-ms/req, %d errors", model, label, protocol,
                    concurrency, point.rps, *(f"{v:.2f}" if v is not None else "-" for v in (point.p50_ms,
                                                                                       point.cpu_ms)), point.errors)
        if index == 0 and pid is not None:
            record.rss_mb.append(tree_rss_mb(pid))
            record.rss_anon_mb.append(tree_rss_anon_mb(pid))


def _time_in_process(bench: Bench, model: str) -> None:
    cores = len(os.sched_getaffinity(0))
    points = measure_in_process(model, version_dir(bench.repo, model), bench.durations[model], (1, 8), (1, cores))
    entry = bench.measurements.in_process.setdefault(model, {})
    for point in points:
        entry.setdefault(f"b{point.load} t{point.batching.lstrip('t')}", []).append(point.rows_per_s)
