"""``python -m loadtest run|sweep|tune|compare|plan``: scenarios with SLO gates, perf_analyzer-style sweeps, a
serving-config tuner, a regression gate between two results, a capacity planner."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from loadtest import compare, plan, sweep, tune
from loadtest.options import (Server, UsageError, add_server_arguments, add_target_arguments, server_from_args,
                              targets_from_args)
from loadtest.payloads import PayloadError
from loadtest.preflight import check_served
from loadtest.refusals import GATEWAY_LIMITED, SERVER, limiter_line
from loadtest.driver import transport_for
from loadtest.payloads import build_payload
from loadtest.replay import RECORDED, add_replay_arguments, replay, replay_schedule
from loadtest.runner import REPLAY, SCENARIOS, RunSpec, parse_duration, replay_outcome, run_scenario
from loadtest.slo import Gates, load_gates
from serving.addresses import grpc_address, rest_address
from serving.checkout import REPO_ROOT

__all__ = ["main", "build_parser"]


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a locust scenario headless and check SLO gates",
                       epilog="Arguments after -- go to locust, e.g. -- --stages 5:2,10:8 or -- --user-rps 20.")
    p.add_argument("scenario", help=f"replay (a capture at its recorded times, open loop: the capacity test), "
                                    f"one of {', '.join(SCENARIOS)} (locust users), or a locustfile path")
    server = p.add_mutually_exclusive_group()
    server.add_argument("--grpc", metavar="HOST:PORT", type=grpc_address,
                        help="load the server's gRPC API at HOST:PORT (or grpc://HOST:PORT); default: the gRPC "
                             "address of the stack make up started")
    server.add_argument("--rest", metavar="URL", type=rest_address,
                        help="load the server's REST API at URL (http:// or https://)")
    p.add_argument("--run-time", default="30s", help="e.g. 30s, 2m (default 30s)")
    p.add_argument("-u", "--users", type=int, default=8, help="users (peak users for ramp/spike)")
    p.add_argument("-r", "--spawn-rate", type=float, default=None, help="users started per second (default: all at once)")
    p.add_argument("--processes", type=int, default=1, help="locust worker processes (one per core)")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "loadtest",
                   help="output directory for reports (default <checkout>/out/loadtest)")
    gates = p.add_argument_group("SLO gates (exit 1 when one is broken)")
    gates.add_argument("--slo-file", type=Path, help='JSON: {"p99_ms": .., "max_failure_ratio": .., "min_rps": ..}')
    gates.add_argument("--p99-ms", type=float, help="p99 latency must be at most this (ms)")
    gates.add_argument("--max-failure-ratio", type=float,
                       help="failures/requests at most this (default 0 unless the file sets it)")
    gates.add_argument("--min-rps", type=float, help="throughput at least this (requests/s)")
    add_target_arguments(p)
    add_replay_arguments(p)
    add_server_arguments(p)
    p.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    gates = Gates(max_failure_ratio=0.0)
    if args.slo_file:
        gates = gates.merged(load_gates(args.slo_file))
    gates = gates.merged(Gates(p99_ms=args.p99_ms, max_failure_ratio=args.max_failure_ratio, min_rps=args.min_rps))
    server = server_from_args(args)
    protocol = "grpc" if server and server.grpc else "rest"
    address = server.address(protocol) if server else None
    # Never taken: server_from_args (required) raises instead of returning None, and the protocol is one it has.
    if server is None or address is None:
        raise UsageError("give --grpc HOST:PORT or --rest URL")
    if server.source:
        print(f"loading {address} over {protocol}: {server.source}")
    check_served(protocol, address, targets_from_args(args)[0], connection=server.connection)
    if args.scenario == REPLAY or args.replay_rate is not None:
        return _cmd_replay(args, server, protocol, address, gates)
    spec = RunSpec(scenario=args.scenario, host=address, protocol=protocol,
                   run_time=parse_duration(args.run_time), users=args.users,
                   spawn_rate=args.spawn_rate or float(args.users), target=targets_from_args(args)[0],
                   out_dir=args.out, processes=args.processes, extra_args=tuple(args.locust_args),
                   connection=server.connection)
    outcome = run_scenario(spec, gates)
    s = outcome.summary
    print(f"payload: {s['payload']['source']}")
    print(f"{s['scenario']} over {s['protocol']}: {s['requests']} requests, {s['failures']} failures, "
          f"{s['rps']:.1f} req/s, p50 {s['p50_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms")
    if s["failures"]:
        by_class = s["failures_by_class"]
        print(f"failures by class: gateway limited {by_class[GATEWAY_LIMITED]}, server {by_class[SERVER]}")
    limited = limiter_line(s["failures_by_class"][GATEWAY_LIMITED], s["requests"], server.role)
    if limited:
        print(limited)
    if s.get("generator_cpu_warning"):
        print("WARNING: locust reported its CPU above 90%: the generator may be the bottleneck; "
              "add --processes", file=sys.stderr)
    if s["error"]:
        print(f"run failed: {s['error']}", file=sys.stderr)
    for gate in outcome.gates:
        print(gate, file=sys.stderr if not gate.passed else sys.stdout)
    print(f"summary: {outcome.summary_path}")
    return outcome.exit_code


def _cmd_replay(args: argparse.Namespace, server: Server, protocol: str, address: str, gates: Gates) -> int:
    """``run replay``: the capture's requests at their recorded times (or ``--replay-rate``), open loop."""
    if args.scenario != REPLAY:
        raise UsageError(f"--replay-rate replays a capture open loop: use the scenario replay, not {args.scenario!r}")
    target = targets_from_args(args)[0]
    payload = build_payload(target)
    if not payload.mix:
        raise UsageError("run replay sends a capture's requests at their recorded times: give --input-data a "
                         "capture file or directory")
    rate = args.replay_rate if args.replay_rate is not None else RECORDED
    schedule = replay_schedule([r.time for r in payload.mix], rate, args.replay_speed)
    print(f"payload: {payload.source}")
    pace = (f"at the recorded times x{args.replay_speed:g}" if rate == RECORDED else f"at {rate:g} requests/s")
    print(f"replaying {len(schedule)} requests over {schedule[-1]:.1f} s, {pace}, open loop", flush=True)
    load, lag = replay(transport_for(protocol, address, payload, connection=server.connection), schedule,
                       max_in_flight=args.users * 8)
    outcome = replay_outcome(load, lag, schedule, protocol, payload, rate, args.replay_speed, gates, args.out)
    s = outcome.summary
    print(f"replay over {protocol}: {s['requests']} requests, {s['failures']} failures, {s['rps']:.1f} req/s, "
          f"p50 {s['p50_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms")
    print(lag.line())
    for gate in outcome.gates:
        print(gate, file=sys.stderr if not gate.passed else sys.stdout)
    print(f"summary: {outcome.summary_path}")
    return outcome.exit_code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m loadtest", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    sweep.add_arguments(sub.add_parser("sweep", help="concurrency or request-rate sweep (perf_analyzer style)"))
    tune.add_arguments(sub.add_parser("tune", help="search threads, variant (XLA), batching (and GPU memory) for "
                                                  "throughput within a p99 budget and p50 at concurrency 1"))
    compare.add_arguments(sub.add_parser("compare", help="compare two sweep/tune/benchmark JSON results level by "
                                                        "level; exit 1 on a regression beyond the measured spread"))
    plan.add_arguments(sub.add_parser("plan", help="replicas, HPA target and autoscaling replayed, from a sweep"))
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run a subcommand; for ``run``, arguments after ``--`` go to locust unchanged (``-- --stages 5:2,10:8``).

    Contradicting flags, a payload no source can give, and a server that does not serve the target
    (``run``, ``sweep`` and ``tune`` check with one metadata call first) exit 2 with the reason.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    locust_args = argv[argv.index("--") + 1:] if "--" in argv else []
    args = build_parser().parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.locust_args = locust_args
    args.argv = argv
    try:
        return int(args.func(args) or 0)
    except (UsageError, PayloadError) as error:
        print(f"python -m loadtest {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
