"""gRPC against REST on one embedded server, side by side: server CPU per request and the SDK's rates.

One server (``serving.server.launcher.ServerProcess``, no batching) serves one
model; closed-loop clients at one concurrency (threads) take turns on it, in
interleaved rounds, so the shared machine's changing load hits every side alike:

- ``sdk``: the SDK's ``GrpcClient`` and ``RestClient``, one client shared by
  every thread (as the SDK tells users to);
- ``lean``: raw bytes, the least client work each protocol allows — a
  pre-serialized PredictRequest on a bytes-in/bytes-out gRPC stub, a
  pre-encoded JSON body on one keep-alive ``http.client`` connection per thread.
  It shows the server's cost without the SDK's own CPU competing for the cores.

For each side: requests/s, the server process's CPU-ms per request (read from
``/proc``; the steadiest figure on a shared machine) and this process's CPU-ms
per request (the client's cost). Targets, exit 1 when one is missed:

- server CPU per gRPC request ≤ per REST request, under the lean clients (the
  SDK's when only they ran; see ``evaluate``);
- ``GrpcClient`` ≥ 1.0 × ``RestClient`` in requests/s.

    python -m benchmarks.protocols                        # digits from <checkout>/models, c=32
    python -m benchmarks.protocols --model-repo /work/models --rounds 5 --duration 4

``measure`` and ``evaluate`` are importable (no side effects) for other benchmarks.
"""
from __future__ import annotations

import argparse
import contextlib
import http.client
import logging
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import grpc
import numpy as np

from benchmarks.server import Target, print_verdicts, process_cpu_seconds
from exporter.manifest import load_manifest
from serving import codec, wire
from serving.client import GrpcClient, RestClient
from serving.model_repo import model_versions
from serving.server.launcher import REPO_ROOT, ServerProcess

__all__ = ["SIDES", "Run", "Side", "build_parser", "closed_loop", "evaluate", "main", "measure", "print_report"]

logger = logging.getLogger("benchmarks.protocols")

SIDES = (("sdk", "grpc"), ("sdk", "rest"), ("lean", "grpc"), ("lean", "rest"))
"""(client, protocol) pairs, measured in this order in every round."""

Call = Callable[[], object]


@dataclass
class Run:
    """Requests finished in one measured window, and the CPU the server and this process used in it."""

    client: str
    protocol: str
    requests: int
    seconds: float
    server_cpu: float
    client_cpu: float
    errors: int = 0

    def __add__(self, other: "Run") -> "Run":
        return Run(self.client, self.protocol, self.requests + other.requests, self.seconds + other.seconds,
                   self.server_cpu + other.server_cpu, self.client_cpu + other.client_cpu,
                   self.errors + other.errors)

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else float("nan")

    def ms_per_request(self, cpu_seconds: float) -> float:
        return cpu_seconds * 1e3 / self.requests if self.requests else float("nan")


@dataclass(frozen=True)
class Side:
    """How one (client, protocol) side makes calls: ``per_thread()`` gives each thread its own call."""

    client: str
    protocol: str
    per_thread: Callable[[], Call]


def closed_loop(server_pid: int, side: Side, concurrency: int, warmup: float, duration: float) -> Run:
    """``concurrency`` threads calling in a loop; counts the calls that end inside the window
    ``[warmup, warmup + duration]`` and the CPU both processes used in it."""
    stop = threading.Event()
    window: list[float] = []          # start, end (perf_counter), set by this thread
    counts = [0, 0]                   # requests in the window, errors
    first_error: list[str] = []
    lock = threading.Lock()

    def loop() -> None:
        call = side.per_thread()
        done = failed = 0
        while not stop.is_set():
            try:
                call()
                ok = True
            except Exception as exc:  # noqa: BLE001 - a benchmark counts failures, whatever they are
                ok = False
                if not first_error:
                    first_error.append(f"{type(exc).__name__}: {exc}")
            end = time.perf_counter()
            if len(window) == 1 and end >= window[0]:
                done, failed = done + ok, failed + (not ok)
        with lock:
            counts[0] += done
            counts[1] += failed

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    time.sleep(warmup)
    server_before, client_before = process_cpu_seconds(server_pid), time.process_time()
    window.append(time.perf_counter())
    time.sleep(duration)
    window.append(time.perf_counter())   # calls ending from here on are not counted
    server_cpu = process_cpu_seconds(server_pid) - server_before
    client_cpu = time.process_time() - client_before
    stop.set()
    for thread in threads:
        thread.join(120)
    if counts[1]:
        logger.warning("%s %s: %d calls failed, the first with %s", side.client, side.protocol, counts[1],
                       first_error[0])
    return Run(side.client, side.protocol, counts[0], window[1] - window[0], server_cpu, client_cpu, counts[1])


def _sides(server: ServerProcess, model: str, inputs: Mapping[str, np.ndarray],
           stack: contextlib.ExitStack) -> list[Side]:
    """Every side of ``SIDES`` on ``server``; clients and channels close with ``stack``."""
    grpc_client = stack.enter_context(GrpcClient(server.grpc_target))
    rest_client = stack.enter_context(RestClient(server.rest_url, max_connections=256))
    payload = codec.encode_predict_request(model, inputs, signature_name=codec.DEFAULT_SIGNATURE)
    body = codec.inputs_to_rest_request(inputs)
    stub = stack.enter_context(grpc.insecure_channel(server.grpc_target)).unary_unary(wire.PREDICT)
    host, port = server.rest_url.split("//")[1].rsplit(":", 1)

    def lean_rest() -> Call:
        connection = http.client.HTTPConnection(host, int(port), timeout=120)
        stack.callback(connection.close)

        def call() -> bytes:
            connection.request("POST", f"/v1/models/{model}:predict", body, {"Content-Type": "application/json"})
            answer = connection.getresponse()
            data = answer.read()
            if answer.status != 200:
                raise RuntimeError(f"REST predict answered {answer.status}")
            return data
        return call

    made = {("sdk", "grpc"): lambda: lambda: grpc_client.predict(model, inputs),
            ("sdk", "rest"): lambda: lambda: rest_client.predict(model, inputs),
            ("lean", "grpc"): lambda: lambda: stub(payload, timeout=120),
            ("lean", "rest"): lean_rest}
    return [Side(client, protocol, made[client, protocol]) for client, protocol in SIDES]


def _check_answers(sides: Sequence[Side], expected: Mapping[str, np.ndarray]) -> None:
    """Every SDK side answers once, with the same outputs, before anything is timed."""
    for side in sides:
        answer = side.per_thread()()
        if side.client == "sdk":
            for name, array in expected.items():
                np.testing.assert_allclose(answer[name], array, rtol=1e-5, atol=1e-6)


def measure(server: ServerProcess, model: str, inputs: Mapping[str, np.ndarray], *, concurrency: int = 32,
            rounds: int = 3, warmup: float = 1.0, duration: float = 4.0,
            clients: Sequence[str] = ("sdk", "lean")) -> list[Run]:
    """Every side of ``SIDES`` whose client is in ``clients``, in turn, ``rounds`` times; one pooled ``Run`` each.

    ``server`` is running and serves ``model``; ``inputs`` is one request's arrays.
    """
    pooled: dict[tuple[str, str], Run] = {}
    with contextlib.ExitStack() as stack:
        sides = [side for side in _sides(server, model, inputs, stack) if side.client in clients]
        with GrpcClient(server.grpc_target) as check:
            expected = check.predict(model, inputs)
        _check_answers(sides, expected)
        for index in range(rounds):
            order = sides if index % 2 == 0 else sides[::-1]   # neither side always goes first
            for side in order:
                run = closed_loop(server.pid, side, concurrency, warmup, duration)
                logger.info("round %d %s %s: %.0f req/s, server %.3f CPU-ms/req, client %.3f CPU-ms/req, "
                            "%d errors", index + 1, side.client, side.protocol, run.rate,
                            run.ms_per_request(run.server_cpu), run.ms_per_request(run.client_cpu), run.errors)
                key = (side.client, side.protocol)
                pooled[key] = pooled[key] + run if key in pooled else run
    return [pooled[key] for key in SIDES if key in pooled]


def _find(runs: Sequence[Run], client: str, protocol: str) -> Optional[Run]:
    return next((r for r in runs if (r.client, r.protocol) == (client, protocol)), None)


def _server_cpu_ratio(runs: Sequence[Run], client: str) -> Optional[float]:
    """Server CPU-ms per gRPC request over per REST request, both driven by ``client``; None if not measured."""
    grpc_run, rest_run = _find(runs, client, "grpc"), _find(runs, client, "rest")
    if not (grpc_run and rest_run):
        return None
    return grpc_run.ms_per_request(grpc_run.server_cpu) / rest_run.ms_per_request(rest_run.server_cpu)


def evaluate(runs: Sequence[Run], concurrency: int = 32) -> list[Target]:
    """The two targets.

    Server CPU per request is compared under the lean clients when they ran:
    they load the server alike and leave it the cores (``RestClient``, through
    httpx, sends headers and body in two writes, which can cost the server a
    second read per request); under the SDK clients otherwise. The rates are the SDK's.
    """
    targets = []
    client = "lean" if _server_cpu_ratio(runs, "lean") is not None else "sdk"
    ratio = _server_cpu_ratio(runs, client)
    if ratio is not None:
        targets.append(Target(f"server CPU per request, gRPC / REST ({client} clients, c={concurrency})", ratio, 1.0,
                              higher_is_better=False))
    grpc_run, rest_run = _find(runs, "sdk", "grpc"), _find(runs, "sdk", "rest")
    if grpc_run and rest_run:
        targets.append(Target(f"GrpcClient / RestClient requests/s (c={concurrency} threads)",
                              grpc_run.rate / rest_run.rate, 1.0))
    return targets


def print_report(runs: Sequence[Run], targets: Sequence[Target], remarks: Sequence[str] = ()) -> None:
    header = f"{'client':<6} {'protocol':<8} {'req/s':>8} {'server CPU-ms/req':>18} {'client CPU-ms/req':>18} " \
             f"{'requests':>9} {'errors':>6}"
    print(header)
    print("-" * len(header))
    for r in runs:
        print(f"{r.client:<6} {r.protocol:<8} {r.rate:>8.0f} {r.ms_per_request(r.server_cpu):>18.3f} "
              f"{r.ms_per_request(r.client_cpu):>18.3f} {r.requests:>9} {r.errors:>6}")
    for client in ("sdk", "lean"):
        ratio = _server_cpu_ratio(runs, client)
        if ratio is not None:
            print(f"info  server CPU per request, gRPC / REST ({client} clients): {ratio:.2f}x")
    print_verdicts(targets, remarks)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.protocols", description=__doc__.split("\n")[0])
    parser.add_argument("--model-repo", type=Path, default=REPO_ROOT / "models", metavar="DIR",
                        help="model repository holding the model (default: <checkout>/models)")
    parser.add_argument("--model", default="digits", help="the model to serve (default: digits)")
    parser.add_argument("--concurrency", type=int, default=32, help="client threads per side (default: 32)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default: 3)")
    parser.add_argument("--duration", type=float, default=4.0, help="seconds measured per side and round")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of load before each window")
    parser.add_argument("--clients", default="sdk,lean", help="sdk, lean or both (default: both)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s] %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)   # one line per request otherwise
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser().parse_args(argv)
    base = (args.model_repo / args.model).resolve()
    inputs = load_manifest(base / str(max(model_versions(base)))).sample_inputs(batch_size=1)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-protocols-") as tmp, \
            ServerProcess.for_models({args.model: base}, workdir=Path(tmp)) as server:
        runs = measure(server, args.model, inputs, concurrency=args.concurrency, rounds=args.rounds,
                       warmup=args.warmup, duration=args.duration, clients=args.clients.split(","))
    targets = evaluate(runs, args.concurrency)
    note = (f"NOTE  {len(os.sched_getaffinity(0))} cores; 1-min load average {load_before[0]:.1f} at the start, "
            f"{os.getloadavg()[0]:.1f} at the end; sides measured in turn, {args.rounds} rounds of "
            f"{args.duration:g} s; CPU-ms per request is the figure least moved by other work on the machine")
    print_report(runs, targets, [note])
    return 0 if targets and all(t.passed for t in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
