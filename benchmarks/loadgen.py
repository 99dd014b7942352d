"""Is the load generator the bottleneck? Measured side by side in one run; prints ratios.

1. The locust gRPC user (``loadtest/locustfiles/steady.py``, ``GrpcUser``), beside
   the locust REST user (``RestUser``, FastHttpUser) and
   2. the sweep's thread generator each fire at a trivial servicer that
   answers every Predict with one canned response (a separate process,
   pinned to another core, that never decodes the request: gRPC, or an aiohttp
   REST endpoint for the REST user), so the server is not the limit. Reported:
   requests/s, the generator's CPU use, and requests per CPU-second of the
   generator = its maximum rate per core.
3. The sweep's throughput against the embedded server (a real model) compared
   with an independent request path at the same concurrency: the official
   ``tensorflow_serving`` stubs (``PredictionServiceStub`` with ``predict_pb2``
   messages) instead of the sweep's prebuilt bytes, on the same closed loop
   (``loadtest.driver``), interleaved A/B/A/B.

    python -m benchmarks.loadgen                                # all three
    python -m benchmarks.loadgen --model-repo models --skip-server

``--model-repo`` defaults to ``<checkout>/models``; the model is exported there
first if it has no version yet (the exporter's ``ensure``).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Optional, Sequence

import grpc
import numpy as np
import psutil
from aiohttp import web

from exporter.export import ensure_model
from loadtest.driver import Connection, measure, transport_for
from loadtest.payloads import Payload, Target, build_payload
from loadtest.sweep import SweepSettings, measure_level
from serving.checkout import REPO_ROOT
from serving.codec import ndarray_to_tensor_proto
from serving.launcher import ServerProcess, free_port, wait_for_port
from serving.wire import apis

__all__ = ["main", "build_parser", "serve_canned", "serve_canned_rest", "independent_predict_rate", "CannedServer",
           "locust_rate"]


# ---------------------------------------------------------------- the canned servicer

def serve_canned(port: int, threads: int = 16) -> None:
    """Serve ``PredictionService/Predict`` with one canned response (bytes in, bytes out) until SIGTERM."""
    response = apis.PredictResponse()
    response.model_spec.name = "canned"
    ndarray_to_tensor_proto(np.full((1, 10), 0.1, np.float32), response.outputs["probabilities"])
    canned = response.SerializeToString()
    handler = grpc.method_handlers_generic_handler("tensorflow.serving.PredictionService", {
        "Predict": grpc.unary_unary_rpc_method_handler(lambda request, context: canned)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=threads), handlers=[handler])
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    server.stop(1)


def serve_canned_rest(port: int) -> None:
    """Answer every REST ``POST`` with one canned Predict body (aiohttp, never reads the JSON) until SIGTERM."""
    canned = json.dumps({"predictions": [[0.1] * 10]}).encode()

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=canned, content_type="application/json")

    app = web.Application()
    app.router.add_post("/{path:.*}", answer)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    web.run_app(app, host="127.0.0.1", port=port, print=None, handle_signals=False)


class CannedServer:
    """The canned servicer in its own process, pinned to ``cpus``: gRPC, or REST with ``rest=True``."""

    def __init__(self, cpus: set[int], rest: bool = False) -> None:
        self.port = free_port()
        self.cpus = cpus
        self.command = "serve-canned-rest" if rest else "serve-canned"

    @property
    def address(self) -> str:
        """What a locust ``--host`` names: ``HOST:PORT`` (gRPC) or ``http://HOST:PORT`` (REST)."""
        where = f"127.0.0.1:{self.port}"
        return f"http://{where}" if self.command == "serve-canned-rest" else where

    def __enter__(self) -> "CannedServer":
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.loadgen", self.command, str(self.port)],
                                     cwd=REPO_ROOT)
        os.sched_setaffinity(self.proc.pid, self.cpus)  # Popen returns once exec ran: before any thread starts
        try:
            wait_for_port(self.port, 120.0, alive=lambda: self.proc.poll() is None)  # a busy machine starts it slowly
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(20)


# ---------------------------------------------------------------- 1. locust gRPC user

def locust_rate(target: str, model_repo: Path, model: str, users: int, duration: int, cpu: int,
                user_class: str = "GrpcUser") -> dict:
    """Run the steady scenario's ``user_class`` (GrpcUser or RestUser) pinned to ``cpu``; requests/s and
    CPU over the middle of the run."""
    out = Path(tempfile.mkdtemp(prefix="loadgen-locust-"))
    cmd = [sys.executable, "-m", "locust", "-f", str(REPO_ROOT / "loadtest/locustfiles/steady.py"), "--headless",
           "--host", target, "-u", str(users), "-r", str(users), "--run-time", f"{duration}s", "--stop-timeout", "2",
           "--csv", str(out / "run"), "--csv-full-history", "--model", model, "--model-repo", str(model_repo),
           "--exit-code-on-error", "0", user_class]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.sched_setaffinity(proc.pid, {cpu})  # Popen returns once exec ran: before locust starts a thread
    ps = psutil.Process(proc.pid)
    time.sleep(duration * 0.3)
    t1, c1 = time.time(), sum(ps.cpu_times()[:2])
    time.sleep(duration * 0.5)
    t2, c2 = time.time(), sum(ps.cpu_times()[:2])
    proc.wait(timeout=duration + 60)
    n1, n2 = _count_at(out / "run_stats_history.csv", t1), _count_at(out / "run_stats_history.csv", t2)
    rate = (n2 - n1) / (t2 - t1)
    cpu_share = (c2 - c1) / (t2 - t1)
    return {"rps": rate, "cpu": cpu_share, "per_core": rate / cpu_share if cpu_share else 0.0}


def _count_at(history: Path, when: float) -> float:
    """Total requests at time ``when``, interpolated from locust's per-second history."""
    points = []
    with open(history, newline="") as handle:
        for row in csv.DictReader(handle):
            if row["Name"] == "Aggregated":
                points.append((float(row["Timestamp"]), float(row["Total Request Count"])))
    before = [p for p in points if p[0] <= when] or points[:1]
    after = [p for p in points if p[0] >= when] or points[-1:]
    (ta, na), (tb, nb) = before[-1], after[0]
    return na if tb == ta else na + (nb - na) * (when - ta) / (tb - ta)


# ---------------------------------------------------------------- 2. the sweep's generator

def sweep_rate(target: str, payload: Payload, concurrency: int, seconds: float) -> dict:
    settings = SweepSettings(levels=(concurrency,), window_s=seconds / 3, stable_windows=3, max_level_s=seconds,
                             warmup_s=1.0)
    result = measure_level(transport_for("grpc", target, payload), concurrency, settings)
    cpu = result.client_cpu_pct / 100.0
    return {"rps": result.throughput_rps, "cpu": cpu, "per_core": result.throughput_rps / cpu if cpu else 0.0,
            "p99_ms": result.p99_ms}


# ---------------------------------------------------------------- 3. independent measurement

def independent_predict_rate(target: str, payload: Payload, concurrency: int, seconds: float) -> float:
    """Successful Predicts per second through the official TF Serving stubs (``PredictionServiceStub`` with
    ``predict_pb2`` messages: every byte encoded by protobuf, none prebuilt), one channel per client."""
    # TensorFlow (tensorflow_serving.apis imports it): the official stubs are the independent measure
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    request = predict_pb2.PredictRequest()
    request.model_spec.name = payload.model_name
    request.model_spec.signature_name = payload.signature_name
    for name, array in payload.inputs.items():
        ndarray_to_tensor_proto(array, request.inputs[name])

    def connect() -> Connection:
        channel = grpc.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        return Connection(lambda: stub.Predict(request, timeout=30), channel.close)

    return measure(connect, concurrency, 1.0, seconds).rate  # 1 s warm-up, as the sweep discards its first


def compare_with_server(model_repo: Path, model: str, concurrency: int, seconds: float,
                        rounds: int) -> list[tuple[float, float]]:
    target = Target(model=model, model_repo=model_repo)
    payload = build_payload(target)
    settings = SweepSettings(levels=(concurrency,), window_s=seconds / 3, stable_windows=3, max_level_s=seconds + 1,
                             warmup_s=1.0, stability_pct=100.0)
    pairs = []
    workdir = Path(tempfile.mkdtemp(prefix="loadgen-server-"))
    with ServerProcess.for_models({target.name: model_repo / target.name}, workdir=workdir) as server:
        for _ in range(rounds):
            sweep = measure_level(transport_for("grpc", server.grpc_target, payload), concurrency,
                                  settings).throughput_rps
            plain = independent_predict_rate(server.grpc_target, payload, concurrency, seconds)
            pairs.append((sweep, plain))
            print(f"  sweep {sweep:8.1f} req/s   official-stub loop {plain:8.1f} req/s   ratio {sweep / plain:.3f}",
                  flush=True)
    return pairs


# ---------------------------------------------------------------- main

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loadgen", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-repo", type=Path, default=REPO_ROOT / "models", metavar="DIR",
                        help="model repository (default: <checkout>/models)")
    parser.add_argument("--model", default="digits")
    parser.add_argument("--duration", type=int, default=12, help="seconds per generator measurement")
    parser.add_argument("--users", type=int, default=16, help="locust users / sweep threads against the canned server")
    parser.add_argument("--concurrency", type=int, default=4, help="concurrency of the sweep-vs-independent check")
    parser.add_argument("--rounds", type=int, default=2, help="A/B rounds of the sweep-vs-independent check")
    parser.add_argument("--skip-server", action="store_true", help="skip part 3 (needs the embedded server)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve-canned"]:
        serve_canned(int(argv[1]))
        return 0
    if argv[:1] == ["serve-canned-rest"]:
        serve_canned_rest(int(argv[1]))
        return 0
    args = build_parser().parse_args(argv)
    args.model_repo = args.model_repo.resolve()
    ensure_model(args.model, out=args.model_repo)
    cpus = sorted(os.sched_getaffinity(0))
    gen_cpu, srv_cpus = cpus[0], set(cpus[1:]) or {cpus[0]}
    payload = build_payload(Target(model=args.model, model_repo=args.model_repo))
    print(f"cores {len(cpus)}: generator pinned to CPU {gen_cpu}, canned servicer to CPUs {sorted(srv_cpus)}; "
          f"payload {payload.label}, {len(payload.grpc_request)} request bytes")
    with CannedServer(srv_cpus) as canned:
        target = f"127.0.0.1:{canned.port}"
        loc = locust_rate(target, args.model_repo, args.model, args.users, args.duration + 6, gen_cpu)
        print(f"1. locust GrpcUser x{args.users} -> canned servicer: {loc['rps']:8.1f} req/s at "
              f"{100 * loc['cpu']:5.1f}% of one core = {loc['per_core']:8.1f} req/s per core")
        with CannedServer(srv_cpus, rest=True) as canned_rest:
            rest = locust_rate(canned_rest.address, args.model_repo, args.model, args.users, args.duration + 6,
                               gen_cpu, user_class="RestUser")
        print(f"   locust RestUser x{args.users} -> canned REST servicer: {rest['rps']:8.1f} req/s at "
              f"{100 * rest['cpu']:5.1f}% of one core = {rest['per_core']:8.1f} req/s per core "
              f"({rest['per_core'] / max(loc['per_core'], 1e-9):.2f}x the gRPC user's)")
        os.sched_setaffinity(0, {gen_cpu})
        try:
            gen = sweep_rate(target, payload, args.users, args.duration)
        finally:
            os.sched_setaffinity(0, set(cpus))
        print(f"2. sweep generator x{args.users} -> canned servicer: {gen['rps']:8.1f} req/s at "
              f"{100 * gen['cpu']:5.1f}% of one core = {gen['per_core']:8.1f} req/s per core")
    if not args.skip_server:
        print(f"3. sweep vs independent measurement, embedded server, {args.model}, concurrency {args.concurrency}:")
        pairs = compare_with_server(args.model_repo, args.model, args.concurrency, args.duration / 2, args.rounds)
        sweep_total, plain_total = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
        print(f"   mean ratio sweep/independent = {sweep_total / plain_total:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
