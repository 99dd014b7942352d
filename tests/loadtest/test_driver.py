"""``loadtest.driver``: the closed and open loops over callable transports (no server: the loops' own rules)."""
from __future__ import annotations

import threading

import pytest

from loadtest.driver import CallFailed, Connection, Load, call_transport, http_transport, measure


def test_closed_loop_counts_only_the_calls_that_end_inside_the_window():
    calls = []
    window = measure(call_transport(lambda: calls.append(1)), 2, 0.05, 0.2)
    assert window.requests > 0 and window.errors == 0
    assert window.requests < len(calls)  # the warmup's calls (and any after the window) are not counted
    assert window.rate == pytest.approx(window.requests / window.seconds)
    assert window.seconds >= 0.2


def test_a_failed_call_is_recorded_by_its_kind_and_details():
    def fail() -> None:
        raise CallFailed("HTTP 503", "overloaded")

    window = measure(call_transport(fail), 1, 0.0, 0.05)
    assert window.requests == 0 and window.errors > 0
    assert window.first_error == "HTTP 503: overloaded"
    assert window.records[0].error == "HTTP 503" and window.records[0].details == "overloaded"


def test_each_closed_loop_worker_gets_its_own_connection_and_closes_it():
    opened, closed = [], []

    def connect() -> Connection:
        opened.append(1)
        return Connection(lambda: None, lambda: closed.append(1))

    with Load(connect, concurrency=3):
        pass
    assert len(opened) == len(closed) == 3


def test_open_loop_sends_at_its_rate_for_its_duration_and_times_from_the_schedule():
    load = Load(call_transport(lambda: None), concurrency=4, rate=100.0, duration=0.2).start()
    assert load.wait_sent(timeout=10)
    assert load.sent == 20 and len(load.records) == 20 and not load.overflowed
    sends = sorted(r.sent for r in load.records)
    assert all(b - a == pytest.approx(0.01, abs=1e-6) for a, b in zip(sends, sends[1:]))


def test_open_loop_starts_calls_without_a_thread_each_when_the_connection_can():
    threads_at_start = threading.active_count()
    in_flight_threads = []

    def start(done) -> None:
        in_flight_threads.append(threading.active_count())
        threading.Timer(0.05, done, (None,)).start()   # the "transport's" own completion thread

    load = Load(call_transport(lambda: None, start), concurrency=50, rate=200.0, duration=0.1).start()
    assert load.wait_sent(timeout=10)
    assert load.sent == 20 and len(load.records) == 20
    assert all(r.latency >= 0.05 for r in load.records)
    assert max(in_flight_threads) < threads_at_start + 20   # no pool thread per call in flight


def test_open_loop_stops_sending_once_its_calls_in_flight_are_full():
    release = threading.Event()
    load = Load(call_transport(release.wait), concurrency=3, rate=200.0, duration=5.0, when_full="stop").start()
    try:
        assert load.stopped_sending.wait(timeout=5) and load.overflowed
    finally:
        release.set()
        load.stop()
    assert load.sent == 3 and len(load.records) == 3


def test_bad_settings_are_refused_naming_the_rule():
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        Load(call_transport(lambda: None), concurrency=0)
    with pytest.raises(ValueError, match="when_full must be wait or stop"):
        Load(call_transport(lambda: None), concurrency=1, rate=1.0, when_full="drop")


def test_a_scheduled_load_calls_a_callable_transport_with_each_requests_index():
    # A replay's schedule names recorded requests by index; a callable transport gets that index.
    calls: list[int] = []
    load = Load(call_transport(calls.append), concurrency=2,
                schedule=lambda i: 0.01 * i if i < 5 else None).start()
    try:
        assert load.wait_sent(timeout=10)
    finally:
        load.stop()
    assert [r.error for r in load.records] == [None] * 5 and sorted(calls) == [0, 1, 2, 3, 4]


def test_a_rest_base_url_without_a_host_is_refused_when_the_transport_is_made():
    # (it used to fail inside each worker's connect(), on the worker's thread, where the closed loop's
    # start() then waited for that worker forever)
    with pytest.raises(ValueError, match="names no host"):
        http_transport("http://:8501", "/v1/models/digits:predict", b"{}")
