"""What the gateway costs: the same load through the gateway container and straight to tfserving.

On the running compose stack (``make up``, or ``make up IMAGES=local`` where no
registry answers), in interleaved rounds, each load is measured straight to
the ``tfserving`` container (plain gRPC and HTTP on its compose-network
address, which publishes no host port) and through the ``gateway`` (TLS and
an API key, on its published ports), in alternating order each round, so the
machine's drift hits both sides alike. It prints req/s and p50 per side, the
throughput ratio and the p50 the gateway adds, then PASS/FAIL:

- digits, gRPC and REST at concurrency 32: gateway ≥ 0.9 × direct throughput;
- digits, gRPC and REST at concurrency 1: gateway p50 − direct p50 ≤ 1 ms.

resnet50 (gRPC and REST at concurrency 1 and 8) is printed beside them: its
model cost dwarfs the gateway's. Clients and servers share this machine's
cores, the gateway's TLS included, which is what a client on the same host
as the stack sees.

    python -m benchmarks.gateway                       # the stack of make up (stack.json)
    python -m benchmarks.gateway --start               # make up IMAGES=local first if none runs; down after

A stack of ``make up`` keeps the gateway's per-client rate limit (``GATEWAY_RATE``,
100 r/s): start it with ``GATEWAY_RATE=1000000r/s GATEWAY_BURST=1000000`` to
benchmark it (``--start`` does); refused requests are counted as errors.

The stack is read from ``<work dir>/stack.json`` (``make up`` writes it): the
gateway's addresses, the CA; the client API key is ``client.api-key`` beside
the CA (``make certs``).
"""
from __future__ import annotations

import argparse
import json
import os
import ssl
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import grpc
import numpy as np

from benchmarks.server import Target, print_verdicts, run_grpc, run_rest
from exporter.manifest import load_manifest
from serving import codec
from serving.config.compose import COMPOSE_FILES, LOCAL_OVERRIDE, compose_command, with_grafana_placeholder
from serving.config.stack import DEFAULT_WORK_DIR, STATE_FILE, StackState, read_state
from serving.model_repo import model_versions
from serving.server.launcher import REPO_ROOT

__all__ = ["Load", "LOADS", "Result", "evaluate", "build_parser", "main"]


@dataclass(frozen=True)
class Load:
    model: str
    protocol: str  # grpc | rest
    concurrency: int


LOADS = (Load("digits", "grpc", 1), Load("digits", "grpc", 32), Load("digits", "rest", 1),
         Load("digits", "rest", 32), Load("resnet50", "grpc", 1), Load("resnet50", "grpc", 8),
         Load("resnet50", "rest", 1), Load("resnet50", "rest", 8))


@dataclass
class Result:
    load: Load
    side: str  # direct | gateway
    requests_per_s: float
    p50_ms: float
    errors: int


@dataclass(frozen=True)
class Endpoints:
    """Both sides of the comparison, and how to call the gateway."""

    direct_grpc: str
    direct_rest: str
    gateway_grpc: str
    gateway_rest: str
    ca: Path
    api_key: str


def _tfserving_containers(project: str) -> list[str]:
    """The running tfserving containers of compose project ``project``."""
    return subprocess.run(["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={project}",
                           "--filter", "label=com.docker.compose.service=tfserving"],
                          capture_output=True, text=True).stdout.split()


def _tfserving_address(project: str) -> str:
    """tfserving's address on the compose network (the container publishes no host port)."""
    ids = _tfserving_containers(project)
    if not ids:
        raise SystemExit(f"no running tfserving container of compose project {project!r} (make up; --project)")
    info = json.loads(subprocess.run(["docker", "inspect", ids[0]], capture_output=True, text=True).stdout)[0]
    networks = info["NetworkSettings"]["Networks"]
    return next(n["IPAddress"] for n in networks.values() if n.get("IPAddress"))


def endpoints(state: StackState, project: str) -> Endpoints:
    if not state.backend.startswith("compose") or state.root_certificates is None:
        raise SystemExit(f"the stack in stack.json is {state.backend!r}: this benchmark needs the compose stack "
                         "(make up with a Docker engine, or make up IMAGES=local)")
    address = _tfserving_address(project)
    ca = Path(state.root_certificates)
    return Endpoints(f"{address}:8500", f"http://{address}:8501", state.grpc,
                     state.rest, ca, (ca.parent / "client.api-key").read_text().strip())


def _payloads(model_repo: Path, model: str) -> tuple[bytes, bytes]:
    versions = model_versions(model_repo / model)
    if not versions:
        raise SystemExit(f"{model} has no version in {model_repo}")
    inputs = load_manifest(model_repo / model / str(versions[-1])).sample_inputs()
    return (codec.encode_predict_request(model, inputs, signature_name=codec.DEFAULT_SIGNATURE),
            codec.inputs_to_rest_request(inputs))


def measure(load: Load, side: str, ends: Endpoints, payload: tuple[bytes, bytes], duration: float,
            warmup: float) -> Result:
    gateway = side == "gateway"
    if load.protocol == "grpc":
        credentials = grpc.ssl_channel_credentials(ends.ca.read_bytes()) if gateway else None
        latencies, errors = run_grpc(ends.gateway_grpc if gateway else ends.direct_grpc, payload[0],
                                     load.concurrency, warmup, duration, credentials=credentials,
                                     metadata=[("x-api-key", ends.api_key)] if gateway else ())
    else:
        context = ssl.create_default_context(cafile=str(ends.ca)) if gateway else None
        latencies, errors = run_rest(ends.gateway_rest if gateway else ends.direct_rest, load.model, payload[1],
                                     load.concurrency, warmup, duration, ssl_context=context,
                                     headers={"x-api-key": ends.api_key} if gateway else None)
    p50 = float(np.percentile(latencies, 50)) * 1e3 if latencies else float("nan")
    return Result(load, side, len(latencies) / duration, p50, errors)


def evaluate(results: Sequence[Result]) -> list[Target]:
    """The gateway's targets, from the medians over rounds of each side."""
    def median(load: Load, side: str, field: str) -> float:
        values = [getattr(r, field) for r in results if r.load == load and r.side == side]
        return float(np.median(values)) if values else float("nan")

    targets = []
    for protocol in ("grpc", "rest"):
        wide, one = Load("digits", protocol, 32), Load("digits", protocol, 1)
        targets.append(Target(f"digits {protocol} c=32 throughput, gateway / direct",
                              median(wide, "gateway", "requests_per_s") / median(wide, "direct", "requests_per_s"),
                              0.9))
        targets.append(Target(f"digits {protocol} c=1 p50 added by the gateway",
                              median(one, "gateway", "p50_ms") - median(one, "direct", "p50_ms"), 1.0,
                              higher_is_better=False, unit=" ms"))
    return targets


def print_table(results: Sequence[Result]) -> None:
    print(f"{'model':<9} {'proto':<5} {'c':>3} {'direct req/s (p50 ms)':>24} {'gateway req/s (p50 ms)':>24} "
          f"{'ratio':>6} {'p50 added':>10} {'errors':>7}")
    for load in dict.fromkeys(r.load for r in results):
        rows = {side: [r for r in results if r.load == load and r.side == side] for side in ("direct", "gateway")}
        rps = {s: float(np.median([r.requests_per_s for r in rs])) for s, rs in rows.items()}
        p50 = {s: float(np.median([r.p50_ms for r in rs])) for s, rs in rows.items()}
        errors = sum(r.errors for rs in rows.values() for r in rs)
        print(f"{load.model:<9} {load.protocol:<5} {load.concurrency:>3} "
              f"{rps['direct']:>12.1f} ({p50['direct']:>7.2f}) {rps['gateway']:>12.1f} ({p50['gateway']:>7.2f}) "
              f"{rps['gateway'] / max(rps['direct'], 1e-9):>5.2f}x {p50['gateway'] - p50['direct']:>7.2f} ms "
              f"{errors:>7}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gateway", description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR, help="where make up's stack.json is")
    parser.add_argument("--project", default=os.environ.get("COMPOSE_PROJECT_NAME", "tfs-stack"),
                        help="the compose project (default: $COMPOSE_PROJECT_NAME or tfs-stack)")
    parser.add_argument("--models", default="digits,resnet50", help="comma-separated (default: digits,resnet50)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default: 3)")
    parser.add_argument("--duration", type=float, default=4.0, help="seconds measured per point (default: 4)")
    parser.add_argument("--resnet50-duration", type=float, default=8.0, help="seconds per resnet50 point")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds before measuring (default: 1)")
    parser.add_argument("--start", action="store_true",
                        help="without a compose stack in stack.json: make up IMAGES=local first, down at the end")
    parser.add_argument("--json", type=Path, help="also write the results here")
    return parser


# The gateway's per-client rate limit (.env: 100 r/s, burst 200) would refuse most of a benchmark's
# requests: a stack started here lifts it, unless the environment sets it.
BENCH_LIMITS = {"GATEWAY_RATE": "1000000r/s", "GATEWAY_BURST": "1000000"}


def _start_stack(work_dir: Path, project: str) -> bool:
    """make up IMAGES=local when no compose stack runs; whether it started one."""
    state = read_state(work_dir / STATE_FILE)
    if state is not None and state.backend.startswith("compose") and _tfserving_containers(project):
        return False
    code = subprocess.run([sys.executable, "-m", "serving.stack", "--images", "local", "--work-dir", str(work_dir)],
                          cwd=REPO_ROOT, env={**BENCH_LIMITS, **os.environ}).returncode
    if code != 0:
        raise SystemExit(f"make up IMAGES=local failed ({code})")
    return True


def _down() -> None:
    """``docker compose down`` of the stack ``--start`` brought up (its volumes stay)."""
    files = [a for f in (*COMPOSE_FILES["cpu"], LOCAL_OVERRIDE) for a in ("-f", str(REPO_ROOT / f))]
    subprocess.run([*compose_command(), *files, "down"], cwd=REPO_ROOT, env=with_grafana_placeholder(os.environ))


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    started = _start_stack(args.work_dir, args.project) if args.start else False
    try:
        state = read_state(args.work_dir / STATE_FILE)
        if state is None:
            raise SystemExit(f"no {args.work_dir / STATE_FILE}: start the compose stack with make up first")
        ends = endpoints(state, args.project)
        models = [m for m in args.models.split(",") if m]
        loads = [load for load in LOADS if load.model in models]
        payloads = {m: _payloads(Path(state.model_repo), m) for m in models}
        load_before = os.getloadavg()[0]
        results = []
        for round_ in range(args.rounds):
            for load in loads:
                duration = args.resnet50_duration if load.model == "resnet50" else args.duration
                order = ("direct", "gateway") if round_ % 2 == 0 else ("gateway", "direct")
                results += [measure(load, side, ends, payloads[load.model], duration, args.warmup) for side in order]
        print(f"gateway {ends.gateway_grpc} (TLS, API key) against tfserving {ends.direct_grpc} (plain), "
              f"{args.rounds} interleaved rounds, medians; {len(os.sched_getaffinity(0))} cores, 1-min load "
              f"average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
        print_table(results)
        targets = evaluate(results) if "digits" in models else []
        print_verdicts(targets)
        if args.json is not None:
            args.json.write_text(json.dumps([{**r.load.__dict__, "side": r.side, "requests_per_s": r.requests_per_s,
                                              "p50_ms": r.p50_ms, "errors": r.errors} for r in results], indent=2))
        return 0 if all(t.passed for t in targets) else 1
    finally:
        if started:
            _down()


if __name__ == "__main__":
    sys.exit(main())
