"""``python -m benchmarks.peers``: the arguments, the rounds, the JSON and the report."""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import signal
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from benchmarks.peers.envs import PEERS
from benchmarks.peers.measurements import Machine, Measurements, Settings
from benchmarks.peers.report import comparable_series, exit_code, render
from benchmarks.peers.scenarios import LARGE_MODELS, Bench, batching_proto, run_round
from exporter.export import ensure_model
from serving.checkout import REPO_ROOT

__all__ = ["build_parser", "main"]

DESCRIPTION = "The embedded server beside the Python servers a user would pick instead, in interleaved rounds."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=DESCRIPTION)
    parser.add_argument("--models", default="digits,resnet50",
                        help="comma-separated models to serve (from --model-repo)")
    parser.add_argument("--model-repo", type=Path, default=REPO_ROOT / "models", metavar="DIR",
                        help="model repository; models without a version are exported there first "
                             "(default: <checkout>/models)")
    parser.add_argument("--peers", default=",".join([*PEERS, "tfserving"]),
                        help=f"comma-separated peers among {', '.join([*PEERS, 'tfserving'])} ('' for none)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (every server restarted each)")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds timed per point")
    parser.add_argument("--resnet50-duration", type=float, default=8.0, help="seconds timed per point, resnet50")
    parser.add_argument("--warmup", type=float, default=1.0,
                        help="seconds of load before each timed window (resnet50: at least half its duration, "
                             "as one of its requests takes seconds under load)")
    parser.add_argument("--batching-config", type=Path, default=REPO_ROOT / "serving" / "batching.cpu.config",
                        help="BatchingParameters of the batching server (default: serving/batching.cpu.config)")
    parser.add_argument("--quick", action="store_true",
                        help="one short round: checks that everything runs, measures nothing reliable")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the measurements as JSON")
    parser.add_argument("--render", type=Path, metavar="JSON",
                        help="print the report of a recorded run (--json's file), measure nothing")
    return parser


def _machine() -> Machine:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or "?")
    return Machine(cpu, len(os.sched_getaffinity(0)), platform.python_version(), os.getloadavg()[0])


def main(argv: Optional[Sequence[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s] %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request would cost the client CPU
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # finally blocks stop the servers
    args = build_parser().parse_args(argv)
    if args.render:
        measurements = Measurements.from_json(json.loads(args.render.read_text()))
        print(render(measurements))
        return exit_code(measurements)
    models = [m for m in args.models.split(",") if m]
    peers = [p for p in args.peers.split(",") if p]
    unknown = [p for p in peers if p not in PEERS and p != "tfserving"]
    if unknown:
        build_parser().error(f"unknown peers {unknown}; choose among {', '.join([*PEERS, 'tfserving'])}")
    if args.quick:
        args.rounds, args.duration, args.resnet50_duration, args.warmup = 1, 1.0, 3.0, 0.5
    repo = args.model_repo.resolve()
    for model in models:
        ensure_model(model, out=repo)
    measurements = Measurements(_machine(), Settings(
        "python -m benchmarks.peers " + " ".join(sys.argv[1:] if argv is None else argv), args.rounds, models,
        peers, args.duration, args.resnet50_duration, args.warmup, str(args.batching_config),
        batching_proto(args.batching_config).batch_timeout_micros.value))
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        large = {m: m in LARGE_MODELS for m in models}
        bench = Bench(repo, models, peers, args.batching_config,
                      {m: max(args.warmup, args.resnet50_duration / 2) if large[m] else args.warmup for m in models},
                      {m: args.resnet50_duration if large[m] else args.duration for m in models},
                      Path(tmp), measurements, {})
        for round_index in range(args.rounds):
            print(f"round {round_index + 1}/{args.rounds}", flush=True)
            run_round(bench, round_index)
    measurements.machine.load_after = os.getloadavg()[0]
    if args.json:
        args.json.write_text(json.dumps({**measurements.to_json(), "series": comparable_series(measurements)},
                                        indent=1))
    print(render(measurements))
    return exit_code(measurements)
