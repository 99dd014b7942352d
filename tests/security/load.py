"""Closed-loop saturation and open-loop overload against a gRPC server, bounded in time and in calls in flight.

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
import time
from typing import Any, Callable, Optional, Sequence

import grpc

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


def saturation(stub: Any, request: Any, *, threads: int = 16, seconds: float = 2.0, timeout: float = 60.0) -> float:
    """OK answers per second of ``threads`` closed-loop callers over ``seconds`` (after one warm call each)."""
    stub.Predict(request, timeout=timeout)
    start = threading.Barrier(threads + 1)
    done = [0] * threads

    def caller(index: int) -> None:
        start.wait()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            stub.Predict(request, timeout=timeout)
            done[index] += 1

    workers = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(threads)]
    for worker in workers:
        worker.start()
    start.wait()
    began = time.monotonic()
    for worker in workers:
        worker.join(seconds + timeout)
    return sum(done) / (time.monotonic() - began)


def open_loop(stub: Any, request: Any, rate: float, seconds: float, *, timeout: float = 60.0,
              max_in_flight: int = 1000, drain_seconds: Optional[float] = None) -> OpenLoopResult:
    """Send ``request`` at ``rate``/s for ``seconds``; wait up to ``drain_seconds`` (default ``timeout``)
    for the answers."""
    lock = threading.Lock()
    answers: list[Answer] = []
    in_flight = [0]
    all_answered = threading.Event()
    all_answered.set()

    def answered(future: grpc.Future, sent: float) -> None:
        code = future.code()
        answer = Answer(code, time.monotonic() - sent, "" if code == grpc.StatusCode.OK else future.details() or "")
        with lock:
            answers.append(answer)
            in_flight[0] -= 1
            if in_flight[0] == 0:
                all_answered.set()

    began = time.monotonic()
    sent = late = 0
    overflowed = False
    while True:
        scheduled = began + sent / rate
        now = time.monotonic()
        if scheduled - began >= seconds:
            break
        if scheduled > now:
            time.sleep(scheduled - now)
        elif now - scheduled > 0.05:
            late += 1
        with lock:
            if in_flight[0] >= max_in_flight:
                overflowed = True
                break
            in_flight[0] += 1
            all_answered.clear()
        send_time = time.monotonic()
        future = stub.Predict.future(request, timeout=timeout)
        future.add_done_callback(lambda f, t=send_time: answered(f, t))
        sent += 1
    all_answered.wait(timeout if drain_seconds is None else drain_seconds)
    with lock:
        return OpenLoopResult(rate, seconds, sent, list(answers), late, overflowed, in_flight[0])


@dataclasses.dataclass(frozen=True)
class DrainRecord:
    sent: float       # time.monotonic() of the send
    answered: float
    code: str
    details: str


@dataclasses.dataclass
class DrainResult:
    signalled: float             # time.monotonic() of the SIGTERM
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
    lock = threading.Condition()
    records: list[DrainRecord] = []
    futures: list[Any] = []
    exited = threading.Event()

    def answered(future: Any, sent: float) -> None:
        code = future.code()
        record = DrainRecord(sent, time.monotonic(), code.name,
                             "" if code == grpc.StatusCode.OK else future.details() or "")
        with lock:
            records.append(record)
            lock.notify_all()

    def sender(stub: Any) -> None:
        while not exited.is_set():
            sent = time.monotonic()
            future = stub.Predict.future(request, timeout=timeout)
            with lock:
                futures.append(future)
            future.add_done_callback(lambda f, t=sent: answered(f, t))
            exited.wait(period)   # the open loop's pace, not an ordering of threads

    threads = [threading.Thread(target=sender, args=(stub,), daemon=True) for stub in stubs]
    for thread in threads:
        thread.start()
    with lock:
        assert lock.wait_for(lambda: len(records) >= calls_before, timeout=timeout), "no load before SIGTERM"
    signalled = time.monotonic()
    process.proc.send_signal(signal.SIGTERM)
    while process.running():
        while_draining()
        exited.wait(0.05)   # polling the process's exit
    returncode = process.wait(timeout)
    exited.set()
    for thread in threads:
        thread.join(timeout)
    with lock:
        assert lock.wait_for(lambda: len(records) == len(futures), timeout=timeout), "calls never answered"
        return DrainResult(signalled, returncode, len(futures), list(records))
