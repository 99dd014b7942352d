"""A fleet of identical replicas under an HPA, second by second: load, replicas, p99 and SLO violations.

The capacity planner's simulator. Its parts:

- ``LatencyModel``: one replica's p99 as a function of its request rate,
  interpolated between a sweep's measured (throughput, p99) points. Below the
  lowest measured rate the lowest level's p99 holds; above the highest rate
  measured without errors the replica is overloaded (``p99 = inf``, an SLO
  violation), since nothing was measured there.
- ``TrafficProfile``: offered requests/s over time (``diurnal``, ``spike``,
  ``ramp``, scaled to a peak rate).
- ``simulate``: each second the offered load is spread evenly over the ready
  replicas (a Service's round robin); every ``sync_period_s`` the HPA
  (``loadtest.hpa``) reads the per-pod metric, the mean rate per ready pod over
  the last ``metric_window_s`` (what ``rate(...[1m])`` through
  prometheus-adapter reports), with starting pods as pods without a metric.
  A new pod serves ``startup_s`` after the HPA asked for it (the measured cold
  start: process start, model load, warmup); a scale-down removes starting
  pods first, then ready ones, at once.

What it leaves out, on purpose: the scheduler and node provisioning (a pod
always finds a node), image pulls (add them to ``startup_s``), Prometheus'
scrape interval and the adapter's cache, and queueing across seconds (an
overloaded second does not carry its backlog into the next).
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from loadtest.hpa import HPAController, HPASpec

if TYPE_CHECKING:
    from serving.codec import JSON

__all__ = [
    "LatencyModel",
    "TrafficProfile",
    "PROFILES",
    "profile",
    "Timeline",
    "SimulationResult",
    "simulate",
]


@dataclass(frozen=True)
class LatencyModel:
    """p99 (ms) of one replica against its rate (requests/s), from measured points.

    Build it with ``from_points``: points are taken in order of the sweep's
    levels; a point that adds no throughput over the ones before it (the replica
    was already saturated) is dropped, and p99 is made non-decreasing, so the
    curve is monotonic and errs on the slow side.
    """

    rates: tuple[float, ...]
    p99_ms: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.rates:
            raise ValueError("a latency model needs at least one measured level without errors")
        if list(self.rates) != sorted(self.rates) or len(self.rates) != len(self.p99_ms):
            raise ValueError("latency model rates must be ascending, one p99 per rate")

    @classmethod
    def from_points(cls, points: Sequence[tuple[float, float]]) -> "LatencyModel":
        rates: list[float] = []
        p99: list[float] = []
        for rate, latency in points:
            if rate <= 0 or not math.isfinite(latency):
                continue
            if rates and rate <= rates[-1]:
                continue
            rates.append(rate)
            p99.append(max(latency, p99[-1]) if p99 else latency)
        return cls(tuple(rates), tuple(p99))

    @property
    def capacity_rps(self) -> float:
        """The highest rate measured without errors: beyond it the replica is overloaded."""
        return self.rates[-1]

    def p99_at(self, rate: float) -> float:
        """p99 (ms) at ``rate`` requests/s per replica; ``inf`` beyond ``capacity_rps``."""
        if rate > self.capacity_rps:
            return math.inf
        return float(np.interp(rate, self.rates, self.p99_ms))

    def rate_within(self, p99_budget_ms: float) -> float:
        """The highest rate whose interpolated p99 is within the budget (0 if even the lowest is not)."""
        if self.p99_ms[0] > p99_budget_ms:
            return 0.0
        for i in range(1, len(self.rates)):
            if self.p99_ms[i] > p99_budget_ms:
                r0, r1, l0, l1 = self.rates[i - 1], self.rates[i], self.p99_ms[i - 1], self.p99_ms[i]
                return r0 + (r1 - r0) * (p99_budget_ms - l0) / (l1 - l0)
        return self.capacity_rps


@dataclass(frozen=True)
class TrafficProfile:
    """Offered load: ``rate(t)`` requests/s for ``0 <= t < duration_s``."""

    name: str
    duration_s: int
    rate: Callable[[float], float]
    description: str


def _diurnal(peak: float) -> TrafficProfile:
    trough = 0.25 * peak
    day = 86400

    def rate(t: float) -> float:  # trough at midnight, peak at noon
        return trough + (peak - trough) * (1 - math.cos(2 * math.pi * t / day)) / 2

    return TrafficProfile("diurnal", day, rate, f"24 h cosine from {trough:g} to {peak:g} req/s and back")


def _spike(peak: float) -> TrafficProfile:
    base, before, rise, hold, after = peak / 10, 600, 60, 1200, 1200

    def rate(t: float) -> float:
        if t < before:
            return base
        if t < before + rise:
            return base + (peak - base) * (t - before) / rise
        if t < before + rise + hold:
            return peak
        return base

    return TrafficProfile("spike", before + rise + hold + after, rate,
                          f"{base:g} req/s, x10 to {peak:g} req/s in {rise} s at {before} s, held {hold} s, "
                          f"then back")


def _ramp(peak: float) -> TrafficProfile:
    base, ramp, hold = peak / 10, 7200, 1800

    def rate(t: float) -> float:
        return base + (peak - base) * min(1.0, t / ramp)

    return TrafficProfile("ramp", ramp + hold, rate, f"{base:g} to {peak:g} req/s linearly over {ramp // 3600} h, "
                                                     f"then held {hold // 60} min")


PROFILES: dict[str, Callable[[float], TrafficProfile]] = {"diurnal": _diurnal, "spike": _spike, "ramp": _ramp}


def profile(name: str, peak_rps: float) -> TrafficProfile:
    """The named profile (``diurnal``, ``spike``, ``ramp``) peaking at ``peak_rps``."""
    if name not in PROFILES:
        raise ValueError(f"unknown traffic profile {name!r}; known: {', '.join(PROFILES)}")
    if peak_rps <= 0:
        raise ValueError("the peak rate must be positive")
    return PROFILES[name](peak_rps)


@dataclass
class Timeline:
    """Per-second series of one simulation (``p99_ms`` is ``inf`` where the ready pods were overloaded)."""

    t: list[float] = field(default_factory=list)
    load_rps: list[float] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)
    ready: list[int] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class SimulationResult:
    """What a profile cost and where it broke the SLO."""

    profile: str
    description: str
    duration_s: int
    violation_s: int
    replica_hours: float
    peak_replicas: int
    timeline: Timeline

    @property
    def violation_minutes(self) -> float:
        return self.violation_s / 60.0

    def summary(self) -> dict[str, JSON]:
        return {"profile": self.profile, "description": self.description, "duration_s": self.duration_s,
                "slo_violation_minutes": round(self.violation_minutes, 2),
                "replica_hours": round(self.replica_hours, 2), "peak_replicas": self.peak_replicas}


def simulate(traffic: TrafficProfile, model: LatencyModel, spec: HPASpec, *, p99_budget_ms: float,
             startup_s: float, metric_window_s: float = 60.0) -> SimulationResult:
    """Run ``traffic`` against a fleet the HPA ``spec`` scales; one step per second.

    The fleet starts settled for the first second's load: ``ceil(rate / target)``
    ready replicas within the HPA's bounds.
    """
    hpa = HPAController(spec)
    first = math.ceil(traffic.rate(0) / spec.target)
    ready_at: list[float] = [0.0] * min(spec.max_replicas, max(spec.min_replicas, first))
    window: deque[float] = deque(maxlen=max(1, int(metric_window_s)))
    timeline = Timeline()
    violation_s, pod_seconds = 0, 0.0
    next_sync = spec.sync_period_s
    for second in range(traffic.duration_s):
        now = float(second)
        load = traffic.rate(now)
        ready = sum(1 for t in ready_at if t <= now)
        per_pod = load / ready if ready else math.inf
        p99 = model.p99_at(per_pod) if ready else math.inf
        if p99 > p99_budget_ms:
            violation_s += 1
        if ready:
            window.append(per_pod)
        pod_seconds += len(ready_at)
        timeline.t.append(now)
        timeline.load_rps.append(load)
        timeline.replicas.append(len(ready_at))
        timeline.ready.append(ready)
        timeline.p99_ms.append(p99)
        if now >= next_sync:
            next_sync += spec.sync_period_s
            metric = sum(window) / len(window) if window else 0.0
            desired = hpa.sync(now, len(ready_at), [metric] * ready, missing=len(ready_at) - ready)
            ready_at = _resize(ready_at, desired, now + startup_s)
    return SimulationResult(traffic.name, traffic.description, traffic.duration_s, violation_s,
                            pod_seconds / 3600.0, max(timeline.replicas), timeline)


def _resize(ready_at: list[float], desired: int, new_ready_at: float) -> list[float]:
    """Add pods ready at ``new_ready_at``, or remove the ones that would be ready last first."""
    if desired >= len(ready_at):
        return ready_at + [new_ready_at] * (desired - len(ready_at))
    return sorted(ready_at)[:desired]
