"""Headless scenario runner: locust as a bounded subprocess, CSV/HTML/JSON out, SLO gates checked.

Locust never runs in this process (it monkey-patches with gevent); the
runner builds the request payload once (``loadtest.payloads``: a user file, the
manifest, or the server's metadata), hands it to locust as a file with the
server as locust's ``--host`` (``HOST:PORT`` for gRPC, a URL for REST), waits
at most ``run_time + grace``, then reads locust's CSV files into a JSON
summary (which names the payload's source) and checks the gates.
"""
from __future__ import annotations

import csv
import json
import os
import re
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

from loadtest.documents import (LocustFinal, LocustRunSummary, LocustTotals, ReplaySummary, RunSummary, RunTotals,
                                parse_locust_final)
from loadtest.options import CONNECTION_ENV, connection_environment, server_address
from loadtest.payloads import Payload, Target, build_payload, write_payload
from loadtest.driver import Load
from loadtest.refusals import GATEWAY_LIMITED, failures_by_class
from loadtest.replay import Lag, ReplayRate
from loadtest.slo import GateResult, Gates, evaluate
from serving.checkout import REPO_ROOT
from serving.client import Connection
from serving.processes import stop_process

if TYPE_CHECKING:
    from serving.codec import JSON

__all__ = [
    "SCENARIOS",
    "RunSpec",
    "RunOutcome",
    "locustfile_path",
    "locust_command",
    "build_run_payload",
    "REPLAY",
    "replay_outcome",
    "parse_duration",
    "run_scenario",
    "summarize_csv",
    "EXIT_OK",
    "EXIT_GATE_BROKEN",
    "EXIT_RUN_FAILED",
]

SCENARIOS = ("steady", "ramp", "spike", "soak")
REPLAY = "replay"   # not a locustfile: a capture at its recorded times, open loop (``loadtest.replay``)
EXIT_OK, EXIT_GATE_BROKEN, EXIT_RUN_FAILED = 0, 1, 2
_USER_CLASS = {"grpc": "GrpcUser", "rest": "RestUser"}


def parse_duration(text: str) -> float:
    """Seconds in a locust-style duration: ``"90"``, ``"30s"``, ``"2m"``, ``"1h30m"``."""
    text = str(text).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([hms])", text)
    if not parts or "".join(n + u for n, u in parts) != text.replace(" ", ""):
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 2m, 1h30m)")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def locustfile_path(scenario: str) -> Path:
    """The locustfile of a named scenario, or ``scenario`` itself if it is a path."""
    if scenario in SCENARIOS:
        return Path(__file__).resolve().parent / "locustfiles" / f"{scenario}.py"
    path = Path(scenario)
    if path.suffix == ".py" and path.is_file():
        return path.resolve()
    raise ValueError(f"unknown scenario {scenario!r}; expected one of {SCENARIOS} or a locustfile path")


@dataclass(frozen=True)
class RunSpec:
    """One headless locust run. ``host`` is ``HOST:PORT`` (or ``grpc://HOST:PORT``) for gRPC, a URL for REST.

    A host whose scheme belongs to the other protocol is a ``UsageError``. ``connection`` (TLS, a
    credential) reaches locust through its environment (``loadtest.options.CONNECTION_ENV``), never its
    command line.
    """

    scenario: str
    host: str
    protocol: str = "grpc"
    run_time: float = 30.0
    users: int = 8
    spawn_rate: float = 8.0
    target: Target = field(default_factory=Target)
    out_dir: Path = REPO_ROOT / "out" / "loadtest"
    processes: int = 1
    stop_timeout: float = 5.0
    extra_args: tuple[str, ...] = ()
    connection: Connection = field(default_factory=Connection)

    def __post_init__(self) -> None:
        if self.protocol not in _USER_CLASS:
            raise ValueError(f"protocol must be grpc or rest, got {self.protocol!r}")
        server_address(self.protocol, self.host)

    @property
    def prefix(self) -> Path:
        return Path(self.out_dir) / f"{Path(self.scenario).stem}_{self.protocol}"


@dataclass
class RunOutcome:
    """What a run produced: the summary (also written as JSON), gate verdicts and the exit code."""

    summary: RunSummary
    gates: list[GateResult]
    exit_code: int
    summary_path: Path

    @property
    def broken(self) -> list[GateResult]:
        return [g for g in self.gates if not g.passed]


def _host_for(spec: RunSpec) -> str:
    """Locust's ``--host``: ``HOST:PORT`` for the gRPC user, an ``http(s)://`` URL for the REST user."""
    return server_address(spec.protocol, spec.host)


def build_run_payload(spec: RunSpec) -> Payload:
    """The payload of ``spec``'s target; the metadata, when needed, is read over ``spec``'s protocol."""
    host = _host_for(spec)
    if spec.protocol == "grpc":
        return build_payload(spec.target, grpc=host, connection=spec.connection)
    return build_payload(spec.target, rest=host, connection=spec.connection)


def locust_command(spec: RunSpec, payload_file: Optional[Path] = None) -> list[str]:
    """The ``python -m locust`` command line for ``spec``; ``payload_file`` is a ``write_payload`` file."""
    target = spec.target
    cmd = [
        sys.executable, "-m", "locust", "-f", str(locustfile_path(spec.scenario)),
        "--headless", "--host", _host_for(spec),
        "-u", str(spec.users), "-r", str(spec.spawn_rate), "--run-time", f"{int(round(spec.run_time))}s",
        "--stop-timeout", f"{int(round(spec.stop_timeout))}s", "--exit-code-on-error", "0",
        "--csv", str(spec.prefix), "--html", f"{spec.prefix}.html",
        "--model", target.model, "--variant", target.variant,
        "--model-repo", str(Path(target.model_repo).resolve()),
    ]
    if payload_file is not None:
        cmd += ["--payload-file", str(Path(payload_file).resolve())]
    if target.batch_size is not None:
        cmd += ["--batch-size", str(target.batch_size)]
    if target.signature:
        cmd += ["--signature", target.signature]
    if target.version is not None:  # locust's own --version prints its version: see users.add_target_arguments
        cmd += ["--model-version", str(target.version)]
    if target.version_label:
        cmd += ["--label", target.version_label]
    if spec.processes > 1:
        cmd += ["--processes", str(spec.processes)]
    return [*cmd, *spec.extra_args, _USER_CLASS[spec.protocol]]


def run_scenario(spec: RunSpec, gates: Gates, *, grace: float = 90.0) -> RunOutcome:
    """Run ``spec`` as a subprocess bounded by ``run_time + stop_timeout + grace`` seconds; check ``gates``.

    The payload is built first (``build_run_payload``; ``PayloadError`` when it
    cannot be) and handed to locust in ``PREFIX_payload.json``.
    Exit codes: ``EXIT_OK`` (all gates met), ``EXIT_GATE_BROKEN``, ``EXIT_RUN_FAILED``
    (locust failed, was killed at the bound, or made no requests).
    """
    payload = build_run_payload(spec)
    Path(spec.out_dir).mkdir(parents=True, exist_ok=True)
    for stale in [*Path(spec.out_dir).glob(f"{spec.prefix.name}_exact_*.bin"), Path(f"{spec.prefix}_final.json")]:
        stale.unlink(missing_ok=True)
    payload_file = write_payload(payload, f"{spec.prefix}_payload.json")
    log_path = Path(f"{spec.prefix}.log")
    returncode, timed_out = _run_bounded(locust_command(spec, payload_file), log_path,
                                         spec.run_time + spec.stop_timeout + grace,
                                         connection_environment(spec.connection))
    stats = summarize_csv(spec.prefix)
    results = evaluate(gates, stats) if stats["requests"] > 0 else []
    summary = _summary(spec, stats, returncode, timed_out, log_path, payload, results)
    summary_path = Path(f"{spec.prefix}_summary.json")
    summary_path.write_text(json.dumps(summary, indent=2, default=str))
    if not summary["run_ok"]:
        code = EXIT_RUN_FAILED
    else:
        code = EXIT_OK if all(g.passed for g in results) else EXIT_GATE_BROKEN
    return RunOutcome(summary, results, code, summary_path)


def replay_outcome(load: Load, lag: Lag, schedule: Sequence[float], protocol: str, payload: Payload,
                   rate: ReplayRate, speed: float, gates: Gates, out_dir: Path) -> RunOutcome:
    """The summary of a ``run replay`` (the keys of a locust run's, and the lag), its gates, written as JSON."""
    records = load.records
    ok = np.array([r.latency for r in records if r.error is None]) * 1e3
    failures = sum(r.error is not None for r in records)
    by_error: dict[str, int] = {}
    for record in records:
        if record.error is not None:
            key = f"{record.error}: {record.details}"[:200]
            by_error[key] = by_error.get(key, 0) + 1
    span = (max(r.end for r in records) - min(r.sent for r in records)) if records else 0.0
    pct = np.percentile(ok, [50, 90, 95, 99]) if ok.size else [float("nan")] * 4
    by_class = failures_by_class(by_error)
    totals: RunTotals = {
        "requests": len(records), "failures": failures, "failure_ratio": failures / len(records) if records else 0.0,
        "failures_by_class": by_class, "failures_by_error": by_error,
        "rps": (len(records) - failures) / span if span else 0.0,
        "p50_ms": float(pct[0]), "p90_ms": float(pct[1]), "p95_ms": float(pct[2]), "p99_ms": float(pct[3]),
        "avg_ms": float(ok.mean()) if ok.size else float("nan"), "percentiles": "exact"}
    results = evaluate(gates, totals) if records else []
    run_ok = bool(records) and len(records) == len(schedule)
    summary: ReplaySummary = {
        "scenario": REPLAY, "protocol": protocol, "replay_rate": rate, "replay_speed": speed, **totals,
        "schedule_s": [round(t, 6) for t in schedule[:10000]], "lag": lag.as_dict(),
        "run_ok": run_ok,
        "error": None if len(records) == len(schedule) else f"{len(records)} of {len(schedule)} requests ended",
        "payload": payload.describe(), "gates": [asdict(g) for g in results],
        "passed": run_ok and all(g.passed for g in results)}
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    path = Path(out_dir) / f"{REPLAY}_{protocol}_summary.json"
    path.write_text(json.dumps(summary, indent=2, default=str))
    code = EXIT_RUN_FAILED if not summary["run_ok"] else EXIT_OK if all(g.passed for g in results) else EXIT_GATE_BROKEN
    return RunOutcome(summary, results, code, path)


def _run_bounded(cmd: Sequence[str], log_path: Path, bound: float,
                 connection_env: Optional[dict[str, str]] = None) -> tuple[int, bool]:
    inherited = {k: v for k, v in os.environ.items() if k not in CONNECTION_ENV}  # the run's connection only
    env = {**inherited, **(connection_env or {}),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env,
                                start_new_session=True)
        try:
            return proc.wait(timeout=bound), False
        except subprocess.TimeoutExpired:
            return stop_process(proc, 15, group="all"), True


def _summary(spec: RunSpec, stats: LocustTotals, returncode: int, timed_out: bool, log_path: Path,
             payload: Payload, results: Sequence[GateResult]) -> LocustRunSummary:
    """The run's summary: ``stats`` (``summarize_csv``) with the spec, how locust ended, the payload, the gates."""
    run_ok = returncode == 0 and not timed_out and stats["requests"] > 0
    reason = None
    if timed_out:
        reason = "locust did not stop within its bound and was killed"
    elif returncode != 0:
        reason = f"locust exited with {returncode} (see {log_path})"
    elif stats["requests"] == 0:
        reason = "no requests were made"
    target: dict[str, JSON] = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(spec.target).items()}
    return {
        "scenario": Path(spec.scenario).stem, "protocol": spec.protocol, "host": _host_for(spec),
        "target": target, "users": spec.users, "run_time_s": spec.run_time, **stats,
        "run_ok": run_ok, "error": reason, "locust_exit_code": returncode,
        "generator_cpu_warning": _cpu_warning(log_path),
        "files": {"csv_prefix": str(spec.prefix), "html": f"{spec.prefix}.html", "log": str(log_path)},
        "payload": payload.describe(), "gates": [asdict(g) for g in results],
        "passed": run_ok and all(g.passed for g in results),
    }


def _cpu_warning(log_path: Path) -> bool:
    """Locust logs "CPU usage above 90%" when the generator itself saturates: then the numbers are suspect."""
    try:
        return "CPU usage above" in log_path.read_text(errors="replace")
    except OSError:
        return False


def summarize_csv(prefix: Path) -> LocustTotals:
    """Totals and percentiles (ms) from locust's ``PREFIX_stats.csv``, failures, and latency drift.

    Failures are counted by error and by class (``loadtest.refusals``):
    ``gateway_limited`` (the gateway's limiter refused) apart from ``server``
    (every other failure); ``gateway_limited_ratio`` is the limited share of
    all requests. Percentiles are exact when the locustfile recorded every response time
    (``loadtest.users.ExactLatencies``); otherwise locust's rounded ones.
    """
    row = _aggregated_row(Path(f"{prefix}_stats.csv"))
    final = _final(Path(f"{prefix}_final.json"))
    requests = int(final.get("requests", row.get("Request Count", 0)) or 0)
    failures = int(final.get("failures", row.get("Failure Count", 0)) or 0)
    exact = _exact_latencies(Path(prefix))
    if exact is not None and exact.size:
        p50, p90, p95, p99 = (float(v) for v in np.percentile(exact, [50, 90, 95, 99]))
    else:  # locust's own, rounded to two significant digits
        p50, p90, p95, p99 = (_num(row.get(f"{k}%")) for k in ("50", "90", "95", "99"))
    by_error = final.get("errors", _failures(Path(f"{prefix}_failures.csv")))
    by_class = failures_by_class(by_error)
    return {
        "requests": requests, "failures": failures,
        "failure_ratio": failures / requests if requests else 0.0,
        "failures_by_class": by_class,
        "gateway_limited_ratio": by_class[GATEWAY_LIMITED] / requests if requests else 0.0,
        "rps": final.get("rps", _num(row.get("Requests/s"))),
        "avg_ms": final.get("avg_ms", _num(row.get("Average Response Time"))),
        "p50_ms": p50, "p90_ms": p90, "p95_ms": p95, "p99_ms": p99,
        "max_ms": final.get("max_ms", _num(row.get("Max Response Time"))),
        "percentiles": "exact" if exact is not None and exact.size else "locust (2 significant digits)",
        "latency_samples": int(exact.size) if exact is not None else 0,
        "failures_by_error": by_error,
        "totals": "final" if final else "locust CSV (written once a second; may miss the last second)",
        "drift": _drift(Path(f"{prefix}_stats_history.csv")),
    }


def _final(path: Path) -> LocustFinal:
    """The totals ``ExactLatencies`` wrote when locust quit, or {} (no file, or not such totals)."""
    try:
        return parse_locust_final(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def _exact_latencies(prefix: Path) -> Optional[np.ndarray]:
    """All response times the locust processes recorded (``ExactLatencies``), or None."""
    files = sorted(prefix.parent.glob(f"{prefix.name}_exact_*.bin"))
    if not files:
        return None
    return np.concatenate([np.fromfile(f, dtype=np.float64) for f in files])


def _aggregated_row(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            if row.get("Name") == "Aggregated":
                return row
    return {}


def _failures(path: Path) -> dict[str, int]:
    if not path.exists():
        return {}
    with open(path, newline="") as handle:
        return {row["Error"]: int(row["Occurrences"]) for row in csv.DictReader(handle)}


def _drift(path: Path) -> Optional[dict[str, float]]:
    """Median of the per-second p95 in the first and last quarter of the run (soak: does latency creep?)."""
    if not path.exists():
        return None
    with open(path, newline="") as handle:
        values = [_num(r.get("95%")) for r in csv.DictReader(handle) if r.get("Name") == "Aggregated"]
    values = [v for v in values if v > 0]
    if len(values) < 8:
        return None
    quarter = len(values) // 4
    first, last = statistics.median(values[:quarter]), statistics.median(values[-quarter:])
    return {"p95_first_quarter_ms": first, "p95_last_quarter_ms": last, "ratio": last / first if first else 0.0}


def _num(value: Optional[str]) -> float:
    try:
        return float(value) if value not in (None, "", "N/A") else 0.0
    except ValueError:
        return 0.0
