"""The JSON documents the load tests write and read back by key, as TypedDicts (one shape each).

Typed here:

- ``LocustFinal``: ``<csv prefix>_final.json``, the totals locust printed at the end
  (``loadtest.users.ExactLatencies`` writes it; :func:`parse_locust_final` reads it).
- ``RunTotals`` / ``LocustTotals``: a run's counts, rates and latency percentiles
  (``LocustTotals`` is what ``loadtest.runner.summarize_csv`` returns for a locust run).
- ``RunSummary``: ``<prefix>_summary.json`` of ``python -m loadtest run`` (``loadtest.runner.RunOutcome.summary``);
  ``LocustRunSummary`` for a locust scenario, ``ReplaySummary`` for ``run replay``.
- ``TuneRound``: one paired default/candidate round of a tune trial (``loadtest.tune.Trial.rounds``,
  the ``rounds`` of each trial in ``tune.json``); ``RoundMeasure`` names its per-side numbers.

A document built here is a plain dict at run time: ``json.dumps`` writes it unchanged.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional, TypedDict

if TYPE_CHECKING:
    from loadtest.replay import ReplayRate
    from serving.codec import JSON

__all__ = [
    "LocustFinal",
    "parse_locust_final",
    "RunTotals",
    "LocustTotals",
    "RunVerdict",
    "RunSummary",
    "LocustRunSummary",
    "ReplaySummary",
    "CompactLevel",
    "TuneRound",
    "RoundMeasure",
]


class LocustFinal(TypedDict, total=False):
    """``<csv prefix>_final.json``: locust's own end-of-run totals (absent keys: the CSV files' numbers)."""

    requests: int
    failures: int
    rps: float
    avg_ms: float
    max_ms: float
    errors: dict[str, int]          # occurrences by "METHOD NAME: error"


_FINAL_COUNTS: tuple[Literal["requests", "failures"], ...] = ("requests", "failures")
_FINAL_NUMBERS: tuple[Literal["rps", "avg_ms", "max_ms"], ...] = ("rps", "avg_ms", "max_ms")


def parse_locust_final(document: JSON) -> LocustFinal:
    """``document`` (parsed ``_final.json``) as a ``LocustFinal``; ``ValueError`` where a key has the wrong type."""
    if not isinstance(document, dict):
        raise ValueError(f"a locust final totals document is an object, not {type(document).__name__}")
    final: LocustFinal = {}
    for key in _FINAL_COUNTS:
        if key in document:
            count = document[key]
            if isinstance(count, bool) or not isinstance(count, int):
                raise ValueError(f"{key} is a count, not {count!r}")
            final[key] = count
    for name in _FINAL_NUMBERS:
        if name in document:
            number = document[name]
            if isinstance(number, bool) or not isinstance(number, (int, float)):
                raise ValueError(f"{name} is a number, not {number!r}")
            final[name] = number
    if "errors" in document:
        errors = document["errors"]
        if not isinstance(errors, dict):
            raise ValueError(f"errors is an object of counts, not {errors!r}")
        counts: dict[str, int] = {}
        for error, count in errors.items():
            if isinstance(count, bool) or not isinstance(count, int):
                raise ValueError(f"errors[{error!r}] is a count, not {count!r}")
            counts[error] = count
        final["errors"] = counts
    return final


class RunTotals(TypedDict):
    """A run's counts, throughput (req/s) and latency (ms), locust's or a replay's."""

    requests: int
    failures: int
    failure_ratio: float
    failures_by_class: dict[str, int]      # loadtest.refusals: gateway_limited, server
    failures_by_error: dict[str, int]
    rps: float
    avg_ms: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    percentiles: str                       # "exact", or locust's rounded ones


class LocustTotals(RunTotals):
    """``loadtest.runner.summarize_csv``: a locust run's totals, from ``_final.json`` or locust's CSV files."""

    gateway_limited_ratio: float
    max_ms: float
    latency_samples: int
    totals: str                            # which source the totals came from
    drift: Optional[dict[str, float]]      # p95 in the first and last quarter, and their ratio


class RunVerdict(TypedDict):
    """What every run summary ends with: the payload it sent, the SLO gates' verdicts, and the overall pass."""

    payload: dict[str, JSON]               # loadtest.payloads.Payload.describe()
    gates: list[dict[str, JSON]]           # asdict(loadtest.slo.GateResult) each
    passed: bool


class RunSummary(RunTotals, RunVerdict):
    """``<prefix>_summary.json`` of ``python -m loadtest run``: the keys both a locust run and a replay have."""

    scenario: str
    protocol: str
    run_ok: bool
    error: Optional[str]                   # why the run failed, None when it ran


class LocustRunSummary(RunSummary, LocustTotals):
    """The summary of a locust scenario (steady, ramp, spike, soak or a locustfile)."""

    host: str
    target: dict[str, JSON]                # the Target's fields, paths as text
    users: int
    run_time_s: float
    locust_exit_code: int
    generator_cpu_warning: bool
    files: dict[str, str]                  # csv_prefix, html, log


class ReplaySummary(RunSummary):
    """The summary of ``run replay``: a capture at its recorded times (or a fixed rate), open loop."""

    replay_rate: ReplayRate                # requests/s, or loadtest.replay.RECORDED
    replay_speed: float
    schedule_s: list[float]                # the first 10000 send times
    lag: dict[str, float]                  # loadtest.replay.Lag.as_dict()


class CompactLevel(TypedDict):
    """What a tune round keeps of one sweep level (``loadtest.tune``)."""

    level: float
    throughput_rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    server_cpu_ms_per_request: Optional[float]


RoundMeasure = Literal["baseline_rps", "candidate_rps", "baseline_cpu_ms", "candidate_cpu_ms",
                       "baseline_p50_c1_ms", "candidate_p50_c1_ms"]
"""The per-side numbers of a ``TuneRound`` (``loadtest.tune.round_ratios`` compares two of them)."""


class TuneRound(TypedDict):
    """One paired round of a tune trial: both sides' throughput within the budget, CPU and p50 at concurrency 1."""

    baseline_rps: float
    candidate_rps: float
    baseline_cpu_ms: Optional[float]       # the server's CPU per request at the top level
    candidate_cpu_ms: Optional[float]
    baseline_p50_c1_ms: Optional[float]
    candidate_p50_c1_ms: Optional[float]
    baseline_levels: list[CompactLevel]
    candidate_levels: list[CompactLevel]
