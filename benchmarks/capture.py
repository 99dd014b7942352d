"""What request capture costs the embedded server: capture off, at 10 %, and at 100 %, side by side.

Three embedded servers serve the same model at once, one without
``--request_capture_dir``, one capturing 10 % of the requests and one capturing
every request (budget large enough never to stop). Closed-loop lean clients
(``benchmarks.servers.embedded``: a pre-serialized gRPC request, or one
keep-alive REST connection, per client thread) at each concurrency take turns
on them in interleaved rounds (``benchmarks.runner``), so the shared machine's
load hits all three alike. Printed: the table (requests/s, latency, the server's
CPU-ms per request), the ratios capture / off (medians of the rounds'), the
records each capturing server wrote, and the load average.

    python -m benchmarks.capture --model-repo DIR [--model digits] [--concurrency 1,8] [--protocols grpc,rest]
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks import runner
from benchmarks.runner import Compare, Load, Scenario
from benchmarks.servers import embedded
from serving.capture import capture_files, read_capture

__all__ = ["RATES", "build_parser", "main"]

RATES = {"capture 10%": 0.1, "capture 100%": 1.0}
"""The capturing servers by name, and their ``--request_capture_sample_rate``."""
OFF = "capture off"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.capture", description=__doc__.split("\n")[0])
    parser.add_argument("--model-repo", type=Path, required=True, metavar="DIR")
    parser.add_argument("--model", default="digits")
    parser.add_argument("--concurrency", default="1,8", help="comma-separated (default: 1,8)")
    parser.add_argument("--protocols", default="grpc,rest", help="comma-separated (default: grpc,rest)")
    runner.add_arguments(parser, rounds=3, duration=3.0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s] %(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser().parse_args(argv)
    repo, load_before = args.model_repo.resolve(), os.getloadavg()[0]
    loads = [Load(args.model, protocol, int(c)) for protocol in args.protocols.split(",")
             for c in args.concurrency.split(",")]
    ratios = [Compare(f"{load.protocol} {load.level}: {name} / off {what}", (name, load), (OFF, load), None, metric)
              for load in loads for name in RATES
              for what, metric in (("req/s", "rate"), ("server CPU-ms/req", "cpu"))]
    with tempfile.TemporaryDirectory(prefix="bench-capture-") as scratch:
        directories = {name: Path(scratch) / name.replace(" ", "-").replace("%", "pct") for name in RATES}
        servers = [embedded(OFF, repo)] + [
            embedded(name, repo, flags=(f"--request_capture_dir={directories[name]}",
                                        f"--request_capture_sample_rate={rate}",
                                        f"--request_capture_max_bytes={1 << 40}"))
            for name, rate in RATES.items()]
        cells = runner.run(Scenario(servers, loads, ratios, args.rounds, args.warmup, args.duration))
        written = {name: sum(1 for _ in read_capture(capture_files(d))) if d.exists() else 0
                   for name, d in directories.items()}
        disk = {name: sum(p.stat().st_size for p in capture_files(d)) if d.exists() else 0
                for name, d in directories.items()}
    remarks = [f"NOTE  {name}: {written[name]} records, {disk[name]} bytes written" for name in RATES]
    runner.print_report(cells, ratios, [*remarks, runner.machine_note(
        load_before, f"shared with other work; {args.rounds} interleaved rounds of {args.duration:g} s per side")])
    runner.write_json(args.json, "benchmarks.capture", cells)
    return 0


if __name__ == "__main__":
    sys.exit(main())
