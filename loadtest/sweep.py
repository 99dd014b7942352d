"""A perf_analyzer-style sweep: each concurrency (or request-rate) level measured until stable.

A level runs in time windows; it is stable when the last ``stable_windows``
windows agree on throughput and mean latency within ``stability_pct`` (or
``max_level_s`` passes, and it is marked unstable). Reported per level:
throughput, p50/p90/p95/p99, errors, the server-side split of queueing
against runtime (delta of the server's histograms over the counted windows)
and the generator's own CPU use (to show it was not the bottleneck).

One run can compare batching on/off, gRPC/REST and fp32/xla: the sweep
starts the embedded server once per batching mode (or targets a running
one, ``--grpc``/``--rest``, with no local model repository needed) and sweeps
every (variant, protocol) pair against it. Each variant's payload is built
once against that server (``loadtest.payloads``: a user file, the manifest,
or the server's metadata) and its source is recorded with the series.

Through the gateway, the limiter's refusals (``loadtest.refusals``) are
counted per level as ``gateway_limited`` (and as the error kind ``gateway
limited``); the first level with any is the series' ``limiter_began_at``,
marked in the table, the JSON, the CSV and the plot: from there on the sweep
measured the gateway's rate limit, not the server.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import numpy as np

from loadtest.driver import Load, Record, Transport, transport_for
from loadtest.metrics import Scrape, scrape, split_between
from loadtest.options import (
    UsageError,
    add_server_arguments,
    add_target_arguments,
    grpc_address,
    parse_protocols,
    protocols_for,
    rest_address,
    server_from_args,
    targets_from_args,
)
from loadtest.payloads import Target, build_payload
from loadtest.replay import RECORDED, add_replay_arguments, repeating, replay_schedule
from loadtest.procfs import process_cpu_seconds
from loadtest.refusals import GATEWAY_LIMITED, failure_class, limiter_line
from loadtest.plots import plot_throughput_latency
from loadtest.preflight import check_level_time, check_served, stack_metrics_url
from loadtest.servers import RunningServer, start_server
from serving import addresses
from serving.checkout import REPO_ROOT
from serving.client import Connection
from serving.config import load_batching_parameters
from serving.launcher import BatchingSpec

if TYPE_CHECKING:
    from serving.codec import JSON

__all__ = [
    "SweepSettings",
    "LevelResult",
    "Series",
    "measure_level",
    "sweep_levels",
    "run_sweep",
    "write_outputs",
    "add_arguments",
    "format_table",
]


@dataclass(frozen=True)
class SweepSettings:
    """How each level is measured. ``mode`` is ``concurrency`` or ``rate`` (requests/s, open loop)."""

    levels: tuple[float, ...] = (1, 2, 4, 8, 16)
    mode: str = "concurrency"
    window_s: float = 2.0
    stable_windows: int = 3
    stability_pct: float = 10.0
    max_level_s: float = 30.0
    warmup_s: float = 1.0
    latency_threshold_ms: Optional[float] = None
    max_in_flight: int = 64
    timeout_s: float = 30.0
    recorded: tuple[float, ...] = ()   # mode "replay": the capture's schedule at speed 1 (levels are speeds)

    def __post_init__(self) -> None:
        if self.mode not in ("concurrency", "rate", "replay"):
            raise ValueError(f"mode must be concurrency, rate or replay, got {self.mode!r}")
        if self.stable_windows < 2:
            raise ValueError("stable_windows must be at least 2")


@dataclass
class LevelResult:
    """One level's numbers (latencies in ms, throughput in successful requests/s)."""

    level: float
    mode: str
    throughput_rps: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    avg_ms: float
    requests: int
    errors: int
    error_kinds: dict[str, int]
    stable: bool
    windows: int
    measured_s: float
    client_cpu_pct: float
    server_cpu_pct: Optional[float] = None
    late_starts: int = 0
    generator_limited: bool = False
    server: dict[str, Optional[float]] = field(default_factory=dict)
    window_rps: list[float] = field(default_factory=list)       # each counted window's throughput
    window_p50_ms: list[float] = field(default_factory=list)    # and p50 (``loadtest.compare``'s spread)
    gateway_limited: int = 0    # requests the gateway's limiter refused (counted in ``errors`` too)
    lag_p99_ms: Optional[float] = None   # open loop: p99 of each send's delay behind its schedule


@dataclass
class Series:
    """One curve: a model variant over one protocol against one server configuration."""

    label: str
    model: str
    protocol: str
    batching: str
    levels: list[LevelResult] = field(default_factory=list)
    payload: dict[str, JSON] = field(default_factory=dict)
    limiter_began_at: Optional[float] = None   # the first level the gateway's limiter refused requests at


def limiter_began_at(levels: Sequence[LevelResult]) -> Optional[float]:
    """The first level at which the gateway's limiter refused any request, or None."""
    return next((r.level for r in levels if r.gateway_limited), None)


@dataclass
class _Window:
    start: float
    end: float
    records: list[Record]
    cpu: float
    server_cpu: Optional[float]
    before: Optional[Scrape]
    after: Optional[Scrape]

    @property
    def ok_latencies(self) -> list[float]:
        return [r.latency for r in self.records if r.error is None]

    @property
    def throughput(self) -> float:
        return len(self.ok_latencies) / (self.end - self.start)


def _cpu_seconds(pid: Optional[int]) -> Optional[float]:
    if pid is None:
        return None
    try:
        return process_cpu_seconds(pid)
    except OSError:  # the server went away; the split is still reported
        return None


def measure_level(transport: Transport, level: float, settings: SweepSettings, *,
                  metrics_url: Optional[str] = None, model_name: Optional[str] = None,
                  server_pid: Optional[int] = None) -> LevelResult:
    """Run one level until stable (or ``max_level_s``) and summarise its last windows."""
    concurrency = int(level) if settings.mode == "concurrency" else settings.max_in_flight
    rate = float(level) if settings.mode == "rate" else None
    if settings.mode == "replay" and not settings.recorded:
        raise ValueError("mode replay needs the recorded schedule (SweepSettings.recorded)")
    schedule = repeating([t / level for t in settings.recorded]) if settings.mode == "replay" else None
    windows: list[_Window] = []
    with Load(transport, concurrency=concurrency, rate=rate, schedule=schedule) as load:
        time.sleep(settings.warmup_s)
        mark = len(load.records)
        start, cpu, server_cpu = time.perf_counter(), time.process_time(), _cpu_seconds(server_pid)
        before = scrape(metrics_url, model_name) if metrics_url else None
        late0 = load.late
        while True:
            time.sleep(max(0.0, start + settings.window_s - time.perf_counter()))
            end, new_mark = time.perf_counter(), len(load.records)
            after = scrape(metrics_url, model_name) if metrics_url else None
            records = load.records[mark:new_mark]
            now_cpu, now_server = time.process_time(), _cpu_seconds(server_pid)
            windows.append(_Window(start, end, records, now_cpu - cpu,
                                   None if server_cpu is None or now_server is None else now_server - server_cpu,
                                   before, after))
            start, mark, cpu, server_cpu, before = end, new_mark, now_cpu, now_server, after
            stable = _stable(windows[-settings.stable_windows:], settings)
            if stable or sum(w.end - w.start for w in windows) + settings.warmup_s >= settings.max_level_s:
                break
        late = load.late - late0
    return _summarise(level, settings, windows[-settings.stable_windows:], stable, len(windows), late)


def _stable(windows: Sequence[_Window], settings: SweepSettings) -> bool:
    if len(windows) < settings.stable_windows:
        return False
    for values in ([w.throughput for w in windows],
                   [float(np.mean(w.ok_latencies)) if w.ok_latencies else 0.0 for w in windows]):
        mean = float(np.mean(values))
        if mean <= 0 or any(abs(v - mean) > mean * settings.stability_pct / 100.0 for v in values):
            return False
    return True


def _summarise(level: float, settings: SweepSettings, windows: Sequence[_Window], stable: bool,
               count: int, late: int) -> LevelResult:
    span = windows[-1].end - windows[0].start
    records = [rec for w in windows for rec in w.records]
    ok = np.array([r.latency for r in records if r.error is None]) * 1000.0
    kinds: dict[str, int] = {}
    limited = 0
    for record in records:
        if record.error is not None:
            kind = record.error
            if failure_class(record.details) == GATEWAY_LIMITED:
                kind, limited = "gateway limited", limited + 1
            kinds[kind] = kinds.get(kind, 0) + 1
    pct = np.percentile(ok, [50, 90, 95, 99]) if ok.size else [float("nan")] * 4
    server_cpu = [w.server_cpu for w in windows if w.server_cpu is not None]
    return LevelResult(
        level=level, mode=settings.mode, throughput_rps=ok.size / span,
        p50_ms=float(pct[0]), p90_ms=float(pct[1]), p95_ms=float(pct[2]), p99_ms=float(pct[3]),
        avg_ms=float(ok.mean()) if ok.size else float("nan"), requests=len(records), errors=sum(kinds.values()),
        error_kinds=kinds, stable=stable, windows=count, measured_s=span,
        client_cpu_pct=100.0 * sum(w.cpu for w in windows) / span,
        server_cpu_pct=None if len(server_cpu) < len(windows) else 100.0 * sum(server_cpu) / span,
        late_starts=late, server=split_between(windows[0].before, windows[-1].after).as_dict(),
        window_rps=[round(w.throughput, 3) for w in windows],
        window_p50_ms=[round(float(np.percentile(w.ok_latencies, 50)) * 1000.0, 4) for w in windows if w.ok_latencies],
        generator_limited=_generator_limited(windows, span, late, len(records)), gateway_limited=limited,
        lag_p99_ms=(float(np.percentile([r.waited for r in records], 99)) * 1e3
                    if settings.mode != "concurrency" and records else None))


def _generator_limited(windows: Sequence[_Window], span: float, late: int, requests: int) -> bool:
    """True when the generator, not the server, may have set the pace: its process used most of a
    core (Python threads share one GIL), or the open loop started over 1 % of requests late."""
    return sum(w.cpu for w in windows) / span > 0.85 or (requests > 0 and late / requests > 0.01)


def sweep_levels(transport: Transport, settings: SweepSettings, *, metrics_url: Optional[str] = None,
                 model_name: Optional[str] = None, server_pid: Optional[int] = None,
                 on_level: Callable[[LevelResult], None] = lambda r: None) -> list[LevelResult]:
    """Measure every level in order; stop early once p99 passes ``latency_threshold_ms``."""
    results = []
    for level in settings.levels:
        result = measure_level(transport, level, settings, metrics_url=metrics_url, model_name=model_name,
                               server_pid=server_pid)
        results.append(result)
        on_level(result)
        if settings.latency_threshold_ms is not None and result.p99_ms > settings.latency_threshold_ms:
            break
    return results


# ---------------------------------------------------------------- orchestration (CLI)

_COLUMNS = ("series", "level", "throughput_rps", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "avg_ms", "requests",
            "errors", "stable", "server_request_ms", "server_queue_ms", "server_runtime_ms",
            "server_batch_size_mean", "client_cpu_pct", "server_cpu_pct", "generator_limited", "gateway_limited")


def _row(series: Series, result: LevelResult) -> dict[str, JSON]:
    row = {"series": series.label, **asdict(result), **result.server}
    return {k: row.get(k) for k in _COLUMNS}


def format_table(series: Series) -> str:
    """A fixed-width table of one series, as printed after each sweep."""
    head = (f"{'level':>6} {'thr/s':>8} {'p50':>7} {'p90':>7} {'p95':>7} {'p99':>7} {'err':>5} "
            f"{'srv req':>7} {'queue':>7} {'runtime':>7} {'batch':>5} {'gen%':>5} {'srv%':>5} stable")

    def f(value: Optional[float], spec: str = "7.2f") -> str:
        return format(value, spec) if value is not None else format("-", ">" + spec.split(".")[0])

    lines = [f"== {series.label} (ms; server split = mean over the level from its metrics)", head]
    for r in series.levels:
        s = r.server
        lines.append(f"{r.level:>6g} {r.throughput_rps:>8.1f} {r.p50_ms:>7.2f} {r.p90_ms:>7.2f} {r.p95_ms:>7.2f} "
                     f"{r.p99_ms:>7.2f} {r.errors:>5d} {f(s.get('server_request_ms'))} {f(s.get('server_queue_ms'))} "
                     f"{f(s.get('server_runtime_ms'))} {f(s.get('server_batch_size_mean'), '5.1f')} "
                     f"{r.client_cpu_pct:>5.0f} {f(r.server_cpu_pct, '5.0f')} {'yes' if r.stable else 'NO'}"
                     + ("  GENERATOR-LIMITED" if r.generator_limited else "")
                     + (f"  GATEWAY-LIMITED {100.0 * r.gateway_limited / r.requests:.0f}%"
                        if r.gateway_limited and r.requests else ""))
    began = limiter_began_at(series.levels)
    if began is not None:
        first = next(r for r in series.levels if r.level == began)
        lines.append(f"the gateway's limiter began at level {began:g}; there, "
                     f"{limiter_line(first.gateway_limited, first.requests)}")
    return "\n".join(lines)


def write_outputs(all_series: Sequence[Series], out_dir: Path, meta: dict[str, JSON], name: str = "sweep") -> dict[str, Path]:
    """``NAME.json`` (everything), ``NAME.csv`` (one row per level) and ``NAME.png`` (throughput vs latency)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / f"{name}.json", "csv": out_dir / f"{name}.csv", "png": out_dir / f"{name}.png"}
    paths["json"].write_text(json.dumps({"meta": meta, "series": [asdict(s) for s in all_series]}, indent=2))
    with open(paths["csv"], "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=_COLUMNS)
        writer.writeheader()
        for series in all_series:
            for result in series.levels:
                writer.writerow(_row(series, result))
    title = meta.get("title")
    plot_throughput_latency(all_series, paths["png"],
                            title=title if isinstance(title, str) else "throughput vs latency")
    return paths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``sweep`` subcommand's flags."""
    add_target_arguments(parser)
    add_replay_arguments(parser, speeds=True)
    load = parser.add_argument_group("load")
    load.add_argument("--concurrency", default=None, help="closed-loop levels, e.g. 1,2,4,8,16 (default)")
    load.add_argument("--request-rate", default=None, help="open-loop levels in requests/s, e.g. 50,100,200")
    load.add_argument("--protocol", default=None,
                      help="grpc, rest or grpc,rest (compared in one run); default: each of --grpc/--rest given, "
                           "else grpc")
    load.add_argument("--window", type=float, default=2.0, help="measurement window, s (default 2)")
    load.add_argument("--stable-windows", type=int, default=3, help="windows that must agree (default 3)")
    load.add_argument("--stability-pct", type=float, default=10.0, help="agreement, percent (default 10)")
    load.add_argument("--max-level-time", type=float, default=30.0, help="max seconds per level (default 30)")
    load.add_argument("--warmup", type=float, default=1.0, help="seconds discarded at the start of a level")
    load.add_argument("--latency-threshold-ms", type=float, default=None, help="stop once p99 exceeds this")
    load.add_argument("--max-in-flight", type=int, default=64, help="open loop: worker threads (default 64)")
    server = parser.add_argument_group("server (default: the stack make up started, else one started here; "
                                       "--grpc/--rest name a running one, --batching starts one here)")
    server.add_argument("--batching", default=None,
                        help="off, on or on,off: start the embedded server once per mode and compare (default "
                             "off, when no stack is running)")
    server.add_argument("--batching-config", type=Path, default=None,
                        help="BatchingParameters text proto for 'on' (default: the server's defaults)")
    server.add_argument("--server-flag", action="append", default=[], help="extra TF Serving flag (repeatable)")
    server.add_argument("--docker", action="store_true", help="start TF Serving in Docker instead (needs an engine)")
    server.add_argument("--grpc", metavar="HOST:PORT", default=None, type=addresses.grpc_address,
                        help="a running server's gRPC address (or grpc://HOST:PORT)")
    server.add_argument("--rest", metavar="URL", default=None, type=addresses.rest_address, help="a running server's REST URL (http:// or https://)")
    server.add_argument("--metrics-url", default=None,
                        help="a running server's Prometheus page (default: the stack's, when --grpc/--rest is the "
                             "address make up recorded in stack.json)")
    add_server_arguments(parser)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "sweep",
                        help="output directory for reports (default <checkout>/out/sweep)")
    parser.add_argument("--name", default="sweep", help="output file stem (default sweep)")
    parser.set_defaults(func=run_sweep)


def _levels(args: argparse.Namespace) -> tuple[str, tuple[float, ...]]:
    replaying = getattr(args, "replay_rate", None) is not None
    if sum(map(bool, (args.concurrency, args.request_rate, replaying))) > 1:
        raise UsageError("give one of --concurrency, --request-rate or --replay-rate recorded")
    if replaying:
        if args.replay_rate != RECORDED:
            raise UsageError("a sweep replays a capture at its recorded times (--replay-rate recorded, levels "
                             "--replay-speed); for fixed rates of the recorded mix, use --request-rate")
        try:
            speeds = tuple(float(x) for x in (args.replay_speed or "1,2,4,8").split(","))
        except ValueError:
            speeds = (0.0,)
        if not all(x > 0 for x in speeds):
            raise UsageError(f"--replay-speed takes factors above 0, e.g. 1,2,4, got {args.replay_speed!r}")
        return "replay", speeds
    if args.replay_speed:
        raise UsageError("--replay-speed sets the levels of --replay-rate recorded")
    if args.request_rate:
        return "rate", tuple(float(x) for x in args.request_rate.split(","))
    return "concurrency", tuple(int(x) for x in (args.concurrency or "1,2,4,8,16").split(","))


def _batching_params(mode: str, config: Optional[Path]) -> Optional[BatchingSpec]:
    if mode == "off":
        return None
    if mode != "on":
        raise SystemExit(f"--batching takes on/off values, got {mode!r}")
    if config is None:
        return {}
    return load_batching_parameters(config)


def run_sweep(args: argparse.Namespace) -> int:
    """The ``sweep`` subcommand: every batching mode × variant × protocol, one table each, then the files."""
    mode, levels = _levels(args)
    settings = SweepSettings(levels=levels, mode=mode, window_s=args.window, stable_windows=args.stable_windows,
                             stability_pct=args.stability_pct, max_level_s=args.max_level_time,
                             warmup_s=args.warmup, latency_threshold_ms=args.latency_threshold_ms,
                             max_in_flight=args.max_in_flight)
    check_level_time(window_s=args.window, stable_windows=args.stable_windows, warmup_s=args.warmup,
                     max_level_s=args.max_level_time)
    connection = Connection()
    starts_own = bool(args.batching or args.docker or args.server_flag or args.batching_config)
    given = bool(args.grpc or args.rest)
    reached = None if starts_own and not given else server_from_args(args, protocol=None, required=False)
    if reached is not None:
        if not given:  # make up's stack: its gRPC API unless --protocol says otherwise
            wanted = parse_protocols(args.protocol or "grpc")
            args.grpc = reached.grpc if "grpc" in wanted else None
            args.rest = reached.rest if "rest" in wanted else None
            print(f"sweeping {', '.join(filter(None, [args.grpc, args.rest]))}: {reached.source} (--batching "
                  "starts a server here instead)", flush=True)
        connection = reached.connection
    running = bool(args.grpc or args.rest)
    if running and args.metrics_url is None:
        args.metrics_url = stack_metrics_url(args.grpc, args.rest)
    targets = targets_from_args(args)
    protocols = (protocols_for(args.protocol, args.grpc, args.rest) if running
                 else parse_protocols(args.protocol or "grpc"))
    all_series: list[Series] = []
    cold_starts: dict[str, float] = {}
    for batching in (["running"] if running else (args.batching or "off").split(",")):
        started = _server_for(args, batching, targets)
        with started as server:
            if started.cold_start_s is not None:
                cold_starts[batching] = round(started.cold_start_s, 3)
            for target in targets:
                for protocol in protocols:
                    check_served(protocol, _address(server, protocol), target, connection=connection)
                payload = build_payload(target, grpc=server.grpc_target, rest=server.rest_url, connection=connection)
                print(f"payload {payload.label}: {payload.source}", flush=True)
                if mode == "replay":
                    if not payload.mix:
                        raise UsageError("--replay-rate recorded replays a capture: give --input-data a capture "
                                         "file or directory")
                    settings = dataclasses.replace(settings, recorded=tuple(
                        replay_schedule([r.time for r in payload.mix])))
                for protocol in protocols:
                    address = _address(server, protocol)
                    series = Series(f"{target.name}/{protocol}/batching-{batching}", target.name, protocol, batching,
                                    payload=payload.describe())
                    series.levels = sweep_levels(
                        transport_for(protocol, address, payload, settings.timeout_s, connection), settings,
                        metrics_url=server.metrics_url, model_name=target.name, server_pid=server.pid,
                        on_level=functools.partial(_print_level, series))
                    series.limiter_began_at = limiter_began_at(series.levels)
                    all_series.append(series)
                    print(format_table(series), flush=True)
    meta = {"settings": asdict(settings), "model": args.model, "batch_size": args.batch_size,
            "cpus": os.cpu_count(), "title": f"{args.model}: throughput vs latency ({mode} sweep)",
            "batching_config": str(args.batching_config) if args.batching_config else "server defaults",
            "cold_start_s": cold_starts}
    paths = write_outputs(all_series, args.out, meta, args.name)
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def _print_level(series: Series, result: LevelResult) -> None:
    print(f"  {series.label} level {result.level:g}: {result.throughput_rps:.1f}/s p99 {result.p99_ms:.2f} ms",
          flush=True)


def _address(server: "_Running | RunningServer", protocol: str) -> str:
    """The server's address for ``protocol`` (a running server's protocols are those it has an address for:
    ``options.protocols_for``)."""
    address = server.grpc_target if protocol == "grpc" else server.rest_url
    if address is None:
        raise UsageError(f"--protocol {protocol}: the server has no {protocol} address")
    return address


class _Running:
    """A server someone else runs (``--grpc``/``--rest``/``--metrics-url``): only its addresses."""

    pid = None
    cold_start_s = None  # not started here: not measured

    def __init__(self, args: argparse.Namespace) -> None:
        self.grpc_target = grpc_address(args.grpc) if args.grpc else None
        self.rest_url = rest_address(args.rest) if args.rest else None
        self.metrics_url = args.metrics_url

    def __enter__(self) -> "_Running":
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class _Started:
    """A server this sweep starts for one batching mode, stopped on exit.

    ``cold_start_s`` is the time ``start()`` took: process start, model load and
    warmup until every model was AVAILABLE (the capacity planner's pod start-up time).
    """

    def __init__(self, server: RunningServer) -> None:
        self.server = server
        self.cold_start_s: Optional[float] = None

    def __enter__(self) -> RunningServer:
        began = time.perf_counter()
        s = self.server.start()
        self.cold_start_s = time.perf_counter() - began
        print(f"started server ({type(s).__name__}) grpc {s.grpc_target} rest {s.rest_url} "
              f"in {self.cold_start_s:.1f} s", flush=True)
        return s

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


def _server_for(args: argparse.Namespace, batching: str, targets: Sequence[Target]) -> "_Running | _Started":
    if batching == "running":
        return _Running(args)
    models = {t.name: Path(t.model_repo) / t.name for t in targets}
    return _Started(start_server(models, workdir=Path(args.out) / f"server-batching-{batching}",
                                 batching=_batching_params(batching, args.batching_config),
                                 extra_flags=args.server_flag, docker_engine=args.docker))
