"""Closed-loop saturation and open-loop overload against a gRPC server, bounded in time and in calls in flight,
through the one load driver (``loadtest.driver``).

``saturation(stub, request)`` is the closed-loop rate (calls/s that came back
OK) of a few threads for a few seconds. ``open_loop(stub, request, rate,
seconds)`` sends at a fixed rate regardless of answers (latency counted from
each call's send) and returns every call's code and latency; it stops sending
and reports ``overflowed`` once more than ``max_in_flight`` calls are
unanswered, so a server that queues without bound cannot make the test itself
run away. ``until_exit(process, stubs, request, period)`` sends on every stub
at a fixed pace through a SIGTERM, until the server process has exited.
"""
from __future__ import annotations

import dataclasses
import signal
import threading
from typing import Any, Callable, Optional, Sequence

import grpc

from loadtest.driver import Done, Load, Record, Transport, call_transport, clock, future_done, measure

__all__ = ["Answer", "OpenLoopResult", "DrainRecord", "DrainResult", "saturation", "open_loop", "until_exit"]


@dataclasses.dataclass(frozen=True)
class Answer:
    code: grpc.StatusCode
    seconds: float
    details: str = ""


@dataclasses.dataclass
class OpenLoopResult:
    rate: float
    seconds: float
    sent: int
    answers: list[Answer]
    late: int              # calls sent more than 50 ms after their schedule (the generator fell behind)
    overflowed: bool       # stopped early: more than max_in_flight calls were unanswered
    unanswered: int        # still unanswered at the end

    def codes(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for answer in self.answers:
            counts[answer.code.name] = counts.get(answer.code.name, 0) + 1
        return counts

    def latencies(self, *codes: grpc.StatusCode) -> list[float]:
        return sorted(a.seconds for a in self.answers if a.code in codes)

    def summary(self) -> str:
        ok = self.latencies(grpc.StatusCode.OK)
        rejected = self.latencies(grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE)

        def spread(values: list[float]) -> str:
            if not values:
                return "-"
            return f"p50 {values[len(values) // 2] * 1000:.0f} ms, max {values[-1] * 1000:.0f} ms"

        return (f"open loop {self.rate:.0f}/s for {self.seconds:.0f} s: sent {self.sent}, {self.codes()}, "
                f"late sends {self.late}, unanswered {self.unanswered}, overflowed {self.overflowed}; "
                f"accepted {spread(ok)}; rejected {spread(rejected)}")


def _predict(stub: Any, request: Any, timeout: float) -> Transport:
    """``stub.Predict(request)`` as a transport of the one driver (the stub is shared: gRPC stubs are
    thread-safe); the open loop starts calls with ``Predict.future``, no thread per call in flight."""
    def start(done: Done) -> None:
        stub.Predict.future(request, timeout=timeout).add_done_callback(future_done(done))

    return call_transport(lambda: stub.Predict(request, timeout=timeout), start)


def _code(record: Record) -> grpc.StatusCode:
    return grpc.StatusCode.OK if record.error is None else grpc.StatusCode.__members__.get(
        record.error, grpc.StatusCode.UNKNOWN)


def saturation(stub: Any, request: Any, *, threads: int = 16, seconds: float = 2.0, timeout: float = 60.0) -> float:
    """OK answers per second of ``threads`` closed-loop callers over ``seconds`` (after one warm call)."""
    stub.Predict(request, timeout=timeout)
    return measure(_predict(stub, request, timeout), threads, 0.0, seconds).rate


def open_loop(stub: Any, request: Any, rate: float, seconds: float, *, timeout: float = 60.0,
              max_in_flight: int = 1000, drain_seconds: Optional[float] = None) -> OpenLoopResult:
    """Send ``request`` at ``rate``/s for ``seconds``; wait up to ``drain_seconds`` (default ``timeout``)
    for the answers."""
    load = Load(_predict(stub, request, timeout), concurrency=max_in_flight, rate=rate, duration=seconds,
                when_full="stop", late_after=0.05).start()
    load.stopped_sending.wait(seconds + timeout)
    load.wait_sent(timeout if drain_seconds is None else drain_seconds)
    answers = [Answer(_code(r), r.latency - r.waited, r.details) for r in list(load.records)]  # from the send
    return OpenLoopResult(rate, seconds, load.sent, answers, load.late, load.overflowed, load.sent - len(answers))


@dataclasses.dataclass(frozen=True)
class DrainRecord:
    sent: float       # loadtest.driver.clock() of the send
    answered: float
    code: str
    details: str


@dataclasses.dataclass
class DrainResult:
    signalled: float             # loadtest.driver.clock() of the SIGTERM
    returncode: int
    sent: int
    records: list[DrainRecord]   # the answered calls

    def codes(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in self.records:
            counts[record.code] = counts.get(record.code, 0) + 1
        return counts

    @property
    def in_flight(self) -> list[DrainRecord]:
        """Calls sent before the SIGTERM and answered after it."""
        return [r for r in self.records if r.sent < self.signalled < r.answered]


def until_exit(process: Any, stubs: Sequence[Any], request: Any, period: float, *, calls_before: int,
               timeout: float = 60.0, while_draining: Callable[[], None] = lambda: None) -> DrainResult:
    """Each stub sends ``request`` every ``period`` s (open loop: a client that does not stop on errors);
    once ``calls_before`` calls have been answered, SIGTERM ``process`` (a ``ServerProcess``); go on
    sending until it has exited, then wait for every answer. ``while_draining`` is called repeatedly
    until the process exits (e.g. to sample its memory)."""
    answered = threading.Condition()

    def notify(_: Record) -> None:
        with answered:
            answered.notify_all()

    loads = [Load(_predict(stub, request, timeout), concurrency=1000, rate=1.0 / period, catch_up=False,
                  on_record=notify) for stub in stubs]
    for load in loads:
        load.start()
    with answered:
        assert answered.wait_for(lambda: sum(len(load.records) for load in loads) >= calls_before,
                                 timeout=timeout), "no load before SIGTERM"
    signalled = clock()
    process.proc.send_signal(signal.SIGTERM)
    exited = threading.Event()
    while process.running():
        while_draining()
        exited.wait(0.05)   # polling the process's exit
    returncode = process.wait(timeout)
    for load in loads:
        load.stop(timeout)
    sent = sum(load.sent for load in loads)
    records = [DrainRecord(r.sent + r.waited, r.end, _code(r).name, r.details) for load in loads for r in load.records]
    assert len(records) == sent, "calls never answered"
    return DrainResult(signalled, returncode, sent, records)
