"""``python -m loadtest run|sweep|tune``: scenarios with SLO gates, perf_analyzer-style sweeps, a batching tuner."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

__all__ = ["main", "build_parser"]


def _add_target(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("target model")
    group.add_argument("--model", default="digits", help="model name (default digits)")
    group.add_argument("--variant", default="fp32", help="fp32 | xla | trt-fp16 (sweep: comma list)")
    group.add_argument("--signature", default=None, help="signature name (default serving_default)")
    group.add_argument("--model-version", type=int, default=None, help="specific version")
    group.add_argument("--version-label", default=None, help="version label, e.g. stable")
    group.add_argument("--batch-size", type=int, default=1, help="rows per request")
    group.add_argument("--model-repo", type=Path, default=Path("models"),
                       help="repository with <name>/<version>/manifest.json (default models)")


def _add_run(sub) -> None:
    from loadtest.runner import SCENARIOS

    p = sub.add_parser("run", help="run a locust scenario headless and check SLO gates",
                       epilog="Arguments after -- go to locust, e.g. -- --stages 5:2,10:8 or -- --user-rps 20.")
    p.add_argument("scenario", help=f"one of {', '.join(SCENARIOS)} or a locustfile path")
    p.add_argument("--host", required=True, help="gRPC HOST:PORT, or REST URL http://HOST:PORT")
    p.add_argument("--protocol", choices=("grpc", "rest"), default="grpc")
    p.add_argument("--run-time", default="30s", help="e.g. 30s, 2m (default 30s)")
    p.add_argument("-u", "--users", type=int, default=8, help="users (peak users for ramp/spike)")
    p.add_argument("-r", "--spawn-rate", type=float, default=None, help="users started per second (default: all at once)")
    p.add_argument("--processes", type=int, default=1, help="locust worker processes (one per core)")
    p.add_argument("--out", type=Path, default=Path("out/loadtest"), help="output directory")
    gates = p.add_argument_group("SLO gates (exit 1 when one is broken)")
    gates.add_argument("--slo-file", type=Path, help='JSON: {"p99_ms": .., "max_failure_ratio": .., "min_rps": ..}')
    gates.add_argument("--p99-ms", type=float, help="p99 latency must be at most this (ms)")
    gates.add_argument("--max-failure-ratio", type=float,
                       help="failures/requests at most this (default 0 unless the file sets it)")
    gates.add_argument("--min-rps", type=float, help="throughput at least this (requests/s)")
    _add_target(p)
    p.set_defaults(func=_cmd_run)


def _target(args):
    from loadtest.payloads import Target

    variant = args.variant.split(",")[0]
    return Target(model=args.model, variant=variant, signature=args.signature, version=args.model_version,
                  version_label=args.version_label, batch_size=args.batch_size, model_repo=args.model_repo)


def _cmd_run(args) -> int:
    from loadtest.runner import RunSpec, parse_duration, run_scenario
    from loadtest.slo import Gates, load_gates

    gates = Gates(max_failure_ratio=0.0)
    if args.slo_file:
        gates = gates.merged(load_gates(args.slo_file))
    gates = gates.merged(Gates(p99_ms=args.p99_ms, max_failure_ratio=args.max_failure_ratio, min_rps=args.min_rps))
    spec = RunSpec(scenario=args.scenario, host=args.host, protocol=args.protocol,
                   run_time=parse_duration(args.run_time), users=args.users,
                   spawn_rate=args.spawn_rate or float(args.users), target=_target(args), out_dir=args.out,
                   processes=args.processes, extra_args=tuple(args.locust_args))
    outcome = run_scenario(spec, gates)
    s = outcome.summary
    print(f"{s['scenario']} over {s['protocol']}: {s['requests']} requests, {s['failures']} failures, "
          f"{s['rps']:.1f} req/s, p50 {s['p50_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms")
    if s.get("generator_cpu_warning"):
        print("WARNING: locust reported its CPU above 90%: the generator may be the bottleneck; "
              "add --processes", file=sys.stderr)
    if s["error"]:
        print(f"run failed: {s['error']}", file=sys.stderr)
    for gate in outcome.gates:
        print(gate, file=sys.stderr if not gate.passed else sys.stdout)
    print(f"summary: {outcome.summary_path}")
    return outcome.exit_code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m loadtest", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    from loadtest import sweep, tune

    sweep.add_arguments(sub.add_parser("sweep", help="concurrency or request-rate sweep (perf_analyzer style)"),
                        _add_target)
    tune.add_arguments(sub.add_parser("tune", help="search batching parameters for throughput within a p99 budget"),
                       _add_target)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run a subcommand; for ``run``, arguments after ``--`` go to locust unchanged (``-- --stages 5:2,10:8``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    locust_args = argv[argv.index("--") + 1:] if "--" in argv else []
    args = build_parser().parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.locust_args = locust_args
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
