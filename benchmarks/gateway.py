"""What the gateway costs: the same load through the gateway container and straight to tfserving.

On the running compose stack (``make up``, or ``make up IMAGES=local`` where no
registry answers), in interleaved rounds, each load is measured straight to
the ``tfserving`` container (plain gRPC and HTTP on its compose-network
address, which publishes no host port) and through the ``gateway`` (TLS and
an API key, on its published ports), in alternating order each round, so the
machine's drift hits both sides alike (``benchmarks.runner``). It prints req/s and
p50 per side, the throughput ratio and the p50 the gateway adds (medians of the
rounds'), then PASS/FAIL:

- digits, gRPC and REST at concurrency 32: gateway ≥ ``GATEWAY_THROUGHPUT`` (0.9) × direct throughput;
- digits, gRPC and REST at concurrency 1: gateway p50 − direct p50 ≤ ``GATEWAY_ADDED_P50_MS`` (1 ms).

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
import contextlib
import json
import os
import ssl
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import grpc

from benchmarks import runner
from benchmarks.runner import Compare, Load, Scenario, Served
from benchmarks.scenario import Payloads, predict_transport
from benchmarks.servers import has_outputs, payloads_of, running
from benchmarks.targets import GATEWAY_ADDED_P50_MS, GATEWAY_THROUGHPUT
from loadtest.driver import Transport
from serving.checkout import REPO_ROOT
from serving.config.compose import COMPOSE_FILES, LOCAL_OVERRIDE, compose_command, with_grafana_placeholder
from serving.config.served_config import DEFAULT_WORK_DIR, STATE_FILE, StackState, read_state

__all__ = ["LOADS", "Endpoints", "build_parser", "endpoints", "main", "scenario", "targets"]

LOADS = (Load("digits", "grpc", 1), Load("digits", "grpc", 32), Load("digits", "rest", 1),
         Load("digits", "rest", 32), Load("resnet50", "grpc", 1), Load("resnet50", "grpc", 8),
         Load("resnet50", "rest", 1), Load("resnet50", "rest", 8))


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


def _side(ends: Endpoints, payloads: Callable[[Load], Payloads], gateway: bool) -> Served:
    """Straight to tfserving (plain), or through the gateway (TLS and the API key)."""
    def transport(load: Load) -> Transport:
        if load.protocol == "grpc":
            credentials = grpc.ssl_channel_credentials(ends.ca.read_bytes()) if gateway else None
            return predict_transport("grpc", ends.gateway_grpc if gateway else ends.direct_grpc, payloads(load),
                                     credentials=credentials,
                                     metadata=[("x-api-key", ends.api_key)] if gateway else ())
        context = ssl.create_default_context(cafile=str(ends.ca)) if gateway else None
        return predict_transport("rest", ends.gateway_rest if gateway else ends.direct_rest, payloads(load),
                                 ssl_context=context, headers={"x-api-key": ends.api_key} if gateway else None)

    return Served(transport, check=has_outputs)


def targets() -> list[Compare]:
    """The gateway's targets, from the medians of the rounds' ratios and differences."""
    found = []
    for protocol in ("grpc", "rest"):
        wide, one = Load("digits", protocol, 32), Load("digits", protocol, 1)
        found.append(Compare(f"digits {protocol} c=32 throughput, gateway / direct", ("gateway", wide),
                             ("direct", wide), GATEWAY_THROUGHPUT))
        found.append(Compare(f"digits {protocol} c=1 p50 added by the gateway", ("gateway", one), ("direct", one),
                             GATEWAY_ADDED_P50_MS, metric="p50"))
    return found


def scenario(ends: Endpoints, repo: Path, models: Sequence[str], rounds: int = 3, warmup: float = 1.0,
             duration: float = 4.0, resnet50_duration: float = 8.0) -> Scenario:
    """Direct and through the gateway, under ``LOADS`` of ``models`` (requests of ``repo``'s models)."""
    payloads = payloads_of(repo)
    servers = [running(name, _side(ends, payloads, name == "gateway")) for name in ("direct", "gateway")]
    return Scenario(servers, [load for load in LOADS if load.model in models], targets(), rounds, warmup,
                    duration, {"resnet50": resnet50_duration})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gateway", description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR, help="where make up's stack.json is")
    parser.add_argument("--project", default=os.environ.get("COMPOSE_PROJECT_NAME", "tfs-stack"),
                        help="the compose project (default: $COMPOSE_PROJECT_NAME or tfs-stack)")
    parser.add_argument("--models", default="digits,resnet50", help="comma-separated (default: digits,resnet50)")
    runner.add_arguments(parser, rounds=3, duration=4.0, resnet50_duration=8.0)
    parser.add_argument("--start", action="store_true",
                        help="without a compose stack in stack.json: make up IMAGES=local first, down at the end")
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
    with contextlib.ExitStack() as stack:
        if args.start and _start_stack(args.work_dir, args.project):
            stack.callback(_down)
        state = read_state(args.work_dir / STATE_FILE)
        if state is None:
            raise SystemExit(f"no {args.work_dir / STATE_FILE}: start the compose stack with make up first")
        ends = endpoints(state, args.project)
        load_before = os.getloadavg()[0]
        declared = scenario(ends, Path(state.model_repo), args.models.split(","), args.rounds, args.warmup,
                            args.duration, args.resnet50_duration)
        cells = runner.run(declared)
    print(f"gateway {ends.gateway_grpc} (TLS, API key) against tfserving {ends.direct_grpc} (plain), "
          f"{args.rounds} interleaved rounds, medians")
    found = runner.print_report(cells, declared.targets, [runner.machine_note(
        load_before, "clients, servers and the gateway's TLS share these cores")], baseline="direct")
    runner.write_json(args.json, "benchmarks.gateway", cells)
    return 0 if all(t.passed for t in found) else 1


if __name__ == "__main__":
    sys.exit(main())
