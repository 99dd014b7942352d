"""Replaying a capture open loop: each recorded request at its recorded time (or a chosen rate), and the lag.

A capacity test wants production's arrivals, bursts and lulls included, not
a steady rate: ``--replay-rate recorded`` (the default with a capture) sends
captured request ``i`` at ``(t_i - t_0) / speed`` seconds after the start
(``--replay-speed X`` compresses the recording X times); ``--replay-rate R``
sends them in order at a fixed R requests/s. The load is open loop
(``loadtest.driver.Load`` with a ``schedule``): a slow answer never delays
the next request, and each latency counts from the request's scheduled time.

:func:`replay_schedule` is the schedule (offsets in seconds, computed, never
measured); :func:`repeating` loops it for a sweep's levels; :func:`lag_report`
says how far the achieved schedule lagged it (each request's dispatch after
its scheduled time: the generator's delay, not the server's).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

import numpy as np

from loadtest.driver import Load, Record, Transport

__all__ = ["RECORDED", "ReplayRate", "Lag", "parse_replay_rate", "add_replay_arguments", "replay_schedule",
           "repeating", "lag_report", "replay"]

RECORDED = "recorded"
ReplayRate = Union[str, float]   # RECORDED, or requests per second


def parse_replay_rate(text: str) -> ReplayRate:
    """``recorded`` or a positive number of requests per second."""
    if text.strip().lower() == RECORDED:
        return RECORDED
    try:
        rate = float(text)
    except ValueError:
        rate = -1.0
    if not rate > 0:
        raise argparse.ArgumentTypeError(f"--replay-rate takes 'recorded' (the captured inter-arrival times) or "
                                         f"requests per second above 0, got {text!r}")
    return rate


def _speed(text: str) -> float:
    try:
        speed = float(text)
    except ValueError:
        speed = -1.0
    if not speed > 0:
        raise argparse.ArgumentTypeError(f"--replay-speed is a factor above 0 (2: twice as fast), got {text!r}")
    return speed


def add_replay_arguments(parser: argparse.ArgumentParser, *, speeds: bool = False) -> None:
    """``--replay-rate`` and ``--replay-speed`` (a comma list of levels for a sweep, with ``speeds``)."""
    group = parser.add_argument_group(
        "replaying a capture (--input-data CAPTURE), open loop: the capacity test",
        "Each captured request is sent at its recorded time, scaled by --replay-speed, whatever the answers; "
        "the report says how far the sends lagged that schedule.")
    group.add_argument("--replay-rate", type=parse_replay_rate, default=None, metavar="recorded|RPS",
                       help="recorded: keep the captured inter-arrival times (the capacity test); a number: send "
                            "the captured requests in order at that fixed rate")
    if speeds:
        group.add_argument("--replay-speed", default=None, metavar="X[,X...]",
                           help="levels of the sweep with --replay-rate recorded: the recording played X times "
                                "faster, e.g. 1,2,4,8 (default 1,2,4,8)")
    else:
        group.add_argument("--replay-speed", type=_speed, default=1.0, metavar="X",
                           help="play the recorded times X times faster (default 1: as recorded)")


def replay_schedule(times: Sequence[float], rate: ReplayRate = RECORDED, speed: float = 1.0) -> list[float]:
    """Each request's send time in seconds after the first: recorded gaps divided by ``speed``, or ``i / rate``."""
    if speed <= 0:
        raise ValueError(f"speed must be above 0, got {speed}")
    if rate == RECORDED:
        start = times[0] if len(times) else 0.0
        return [(t - start) / speed for t in times]
    if not isinstance(rate, (int, float)) or rate <= 0:
        raise ValueError(f"rate must be 'recorded' or above 0 requests/s, got {rate!r}")
    return [i / rate for i in range(len(times))]


def repeating(schedule: Sequence[float]) -> Callable[[int], Optional[float]]:
    """``schedule`` played again and again (a sweep's level runs until stable): pass ``k`` starts one mean gap
    after pass ``k - 1`` ended; request ``i`` is entry ``i % len(schedule)``."""
    n = len(schedule)
    gap = (schedule[-1] - schedule[0]) / (n - 1) if n > 1 and schedule[-1] > schedule[0] else 1.0
    period = schedule[-1] - schedule[0] + gap
    return lambda i: (i // n) * period + schedule[i % n]


@dataclass(frozen=True)
class Lag:
    """How far the achieved sends lagged the schedule (seconds): each request's dispatch after its scheduled time."""

    requests: int
    scheduled_s: float     # the schedule's length
    p50_s: float
    p99_s: float
    max_s: float
    late: int              # dispatched more than ``late_after`` after schedule
    late_after_s: float

    def as_dict(self) -> dict[str, float]:
        return {"requests": self.requests, "scheduled_s": self.scheduled_s, "lag_p50_ms": self.p50_s * 1e3,
                "lag_p99_ms": self.p99_s * 1e3, "lag_max_ms": self.max_s * 1e3, "late": self.late,
                "late_after_ms": self.late_after_s * 1e3}

    def line(self) -> str:
        return (f"replay lag behind the recorded schedule: p50 {self.p50_s * 1e3:.2f} ms, p99 {self.p99_s * 1e3:.2f} "
                f"ms, max {self.max_s * 1e3:.2f} ms; {self.late} of {self.requests} requests sent more than "
                f"{self.late_after_s * 1e3:.0f} ms late (schedule {self.scheduled_s:.3f} s)")


def lag_report(records: Sequence[Record], schedule: Sequence[float], late_after: float) -> Lag:
    """The lag of ``records`` (``Record.waited``) against ``schedule``."""
    waited = np.array([r.waited for r in records]) if records else np.zeros(1)
    return Lag(len(records), float(schedule[-1] - schedule[0]) if len(schedule) else 0.0,
               float(np.percentile(waited, 50)), float(np.percentile(waited, 99)), float(waited.max()),
               int(np.sum(waited > late_after)), late_after)


def replay(transport: Transport, schedule: Sequence[float], *, max_in_flight: int = 64,
           timeout: Optional[float] = None) -> tuple[Load, Lag]:
    """Send request ``i`` of ``transport``'s mix at ``schedule[i]`` (open loop, at most ``max_in_flight`` in
    flight); return the finished load and its lag."""
    load = Load(transport, concurrency=max_in_flight, schedule=lambda i: schedule[i] if i < len(schedule) else None)
    load.start()
    load.wait_sent(timeout)
    load.stop()
    return load, lag_report(load.records, schedule, load.late_after)
