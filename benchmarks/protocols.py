"""gRPC against REST on one embedded server, side by side: server CPU per request and the SDK's rates.

One server (``serving.launcher.ServerProcess``, no batching) serves one
model; closed-loop clients at one concurrency (threads) take turns on it, in
interleaved rounds, so the shared machine's changing load hits every side alike
(``benchmarks.runner``). It is declared as two servers of the same process:

- ``sdk``: the SDK's ``GrpcClient`` and ``RestClient``, one client shared by
  every thread (as the SDK tells users to); their answers are checked against
  one another before anything is timed;
- ``lean``: raw bytes, the least client work each protocol allows — a
  pre-serialized PredictRequest on a bytes-in/bytes-out gRPC stub (a channel per
  thread), a pre-encoded JSON body on one keep-alive ``http.client`` connection per thread.
  It shows the server's cost without the SDK's own CPU competing for the cores.

Both are transports of ``loadtest.driver``'s closed loop. For each side:
requests/s, the server process's CPU-ms per request (read from ``/proc``; the
steadiest figure on a shared machine) and this process's CPU-ms per request
(the client's cost); ratios are medians of the rounds'. Targets, exit 1 when one is missed:

- server CPU per gRPC request ≤ ``GRPC_SERVER_CPU_OVER_REST`` × per REST request, under the lean
  clients (the SDK's when only they ran; see ``targets``);
- ``GrpcClient`` ≥ ``GRPC_CLIENT_OVER_REST_CLIENT`` × ``RestClient`` in requests/s.

    python -m benchmarks.protocols                        # digits from <checkout>/models, c=32
    python -m benchmarks.protocols --model-repo models --rounds 5 --duration 4
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from benchmarks import runner
from benchmarks.runner import Compare, Load, Scenario, Served, Server
from benchmarks.scenario import Payloads
from benchmarks.servers import payloads_of, predict_served, running
from benchmarks.targets import GRPC_CLIENT_OVER_REST_CLIENT, GRPC_SERVER_CPU_OVER_REST
from loadtest.driver import Transport, call_transport
from serving.checkout import REPO_ROOT
from serving.client import GrpcClient, RestClient
from serving.launcher import ServerProcess

__all__ = ["CLIENTS", "build_parser", "main", "scenario", "targets"]

CLIENTS = ("sdk", "lean")


def _sdk(stack: contextlib.ExitStack, server: ServerProcess, payloads: Callable[[Load], Payloads]) -> Served:
    """The SDK's clients of ``server`` (closed with ``stack``); every answer is checked against gRPC's."""
    clients = {"grpc": stack.enter_context(GrpcClient(server.grpc_target)),
               "rest": stack.enter_context(RestClient(server.rest_url, max_connections=256))}

    def transport(load: Load) -> Transport:
        client, inputs = clients[load.protocol], payloads(load).inputs
        return call_transport(lambda: client.predict(load.model, inputs))

    def check(load: Load, answer: object) -> None:
        if not isinstance(answer, Mapping):
            raise RuntimeError(f"{load.model}: the SDK's {load.protocol} predict returned a {type(answer).__name__}, "
                               "not outputs by name")
        for name, array in clients["grpc"].predict(load.model, payloads(load).inputs).items():
            np.testing.assert_allclose(answer[name], array, rtol=1e-5, atol=1e-6)

    return Served(transport, server.pid, check=check)


def targets(model: str = "digits", concurrency: int = 32) -> list[Compare]:
    """Server CPU per request under the lean clients when they ran: they load the server alike and
    leave it the cores (``RestClient``, through httpx, sends headers and body in two writes, which can
    cost the server a second read per request); under the SDK clients otherwise. The rates are the
    SDK's. Then the CPU ratio under each kind of client, as information."""
    grpc, rest = Load(model, "grpc", concurrency), Load(model, "rest", concurrency)

    def cpu(client: str, limit: Optional[float], where: str = "", fallback: Optional[Compare] = None) -> Compare:
        return Compare(f"server CPU per request, gRPC / REST ({client} clients{where})", (client, grpc),
                       (client, rest), limit, metric="cpu", fallback=fallback)

    where = f", c={concurrency}"
    return [cpu("lean", GRPC_SERVER_CPU_OVER_REST, where, cpu("sdk", GRPC_SERVER_CPU_OVER_REST, where)),
            Compare(f"GrpcClient / RestClient requests/s (c={concurrency} threads)", ("sdk", grpc), ("sdk", rest),
                    GRPC_CLIENT_OVER_REST_CLIENT),
            *(cpu(client, None) for client in CLIENTS)]


def scenario(server: ServerProcess, repo: Path, model: str = "digits", concurrency: int = 32,
             clients: Sequence[str] = CLIENTS, rounds: int = 3, warmup: float = 1.0,
             duration: float = 4.0) -> Scenario:
    """``clients`` of the running ``server`` of ``model``, over gRPC and over REST."""
    payloads = payloads_of(repo)
    declared = {"sdk": Server("sdk", lambda stack, models: _sdk(stack, server, payloads)),
                "lean": running("lean", predict_served(server, payloads, server.pid))}
    return Scenario([declared[c] for c in CLIENTS if c in clients],
                    [Load(model, protocol, concurrency) for protocol in ("grpc", "rest")],
                    targets(model, concurrency), rounds, warmup, duration)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.protocols", description=__doc__.split("\n")[0])
    parser.add_argument("--model-repo", type=Path, default=REPO_ROOT / "models", metavar="DIR",
                        help="model repository holding the model (default: <checkout>/models)")
    parser.add_argument("--model", default="digits", help="the model to serve (default: digits)")
    parser.add_argument("--concurrency", type=int, default=32, help="client threads per side (default: 32)")
    runner.add_arguments(parser, rounds=3, duration=4.0)
    parser.add_argument("--clients", default="sdk,lean", help="sdk, lean or both (default: both)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s] %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)   # one line per request otherwise
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser().parse_args(argv)
    repo = args.model_repo.resolve()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-protocols-") as tmp, \
            ServerProcess.for_models({args.model: repo / args.model}, workdir=Path(tmp)) as server:
        declared = scenario(server, repo, args.model, args.concurrency, args.clients.split(","), args.rounds,
                            args.warmup, args.duration)
        cells = runner.run(declared)
    found = runner.print_report(cells, declared.targets, [runner.machine_note(
        load_before, f"sides measured in turn, {args.rounds} rounds of {args.duration:g} s; CPU-ms per request "
                     "is the figure least moved by other work on the machine")])
    runner.write_json(args.json, "benchmarks.protocols", cells)
    return 0 if found and all(t.passed for t in found) else 1


if __name__ == "__main__":
    sys.exit(main())
