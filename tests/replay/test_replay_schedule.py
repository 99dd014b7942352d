"""The open-loop replay schedule: recorded inter-arrival times (scaled), a fixed rate, and the driver keeping it.

Nothing here is timed: the assertions are on the schedule computed and on the
scheduled start each call was recorded with (``Record.sent``, which the open
loop sets from the schedule, not from the clock at dispatch).
"""
from __future__ import annotations

import argparse

import pytest

from loadtest.driver import Load, call_transport
from loadtest.replay import (
    RECORDED,
    lag_report,
    parse_replay_rate,
    repeating,
    replay,
    replay_schedule,
)

RECORDED_TIMES = [1000.0, 1000.05, 1000.3, 1000.31, 1000.9, 1002.0]   # bursts and lulls


def test_recorded_rate_keeps_the_recorded_inter_arrival_times_scaled_by_speed():
    assert replay_schedule(RECORDED_TIMES) == pytest.approx([0, 0.05, 0.3, 0.31, 0.9, 2.0])
    assert replay_schedule(RECORDED_TIMES, RECORDED, speed=4) == pytest.approx([0, 0.0125, 0.075, 0.0775, 0.225, 0.5])


def test_fixed_rate_sends_the_recorded_requests_in_order_evenly():
    assert replay_schedule(RECORDED_TIMES, 10.0) == pytest.approx([0, 0.1, 0.2, 0.3, 0.4, 0.5])


def test_repeating_schedule_starts_the_next_pass_one_mean_gap_after_the_last():
    schedule = repeating(replay_schedule(RECORDED_TIMES))
    assert [schedule(i) for i in range(7)] == pytest.approx([0, 0.05, 0.3, 0.31, 0.9, 2.0, 2.4])


def test_replay_rate_flag_takes_recorded_or_a_positive_rate():
    assert parse_replay_rate("recorded") == RECORDED and parse_replay_rate("25") == 25.0
    for bad in ("0", "-3", "fast"):
        with pytest.raises(argparse.ArgumentTypeError, match="recorded"):
            parse_replay_rate(bad)


def test_open_loop_sends_request_i_at_its_recorded_offset():
    sent: list[int] = []
    schedule = replay_schedule(RECORDED_TIMES, speed=20)   # 0.1 s in all
    load, lag = replay(call_transport(sent.append), schedule, max_in_flight=4, timeout=60)
    assert sorted(sent) == list(range(len(RECORDED_TIMES)))   # each recorded request once, by its index
    starts = sorted(r.sent for r in load.records)
    assert [s - starts[0] for s in starts] == pytest.approx(schedule, abs=1e-9)
    assert lag.requests == len(RECORDED_TIMES) and lag.scheduled_s == pytest.approx(0.1)
    assert lag.max_s >= lag.p99_s >= lag.p50_s >= 0


def test_a_load_takes_a_rate_or_a_schedule_not_both():
    with pytest.raises(ValueError, match="rate or a schedule"):
        Load(call_transport(lambda: None), 1, rate=5.0, schedule=lambda i: None)


def test_lag_report_counts_sends_later_than_the_limit():
    from loadtest.driver import Record

    records = [Record(1.0, 0.1, waited=w) for w in (0.0, 0.002, 0.030, 0.5)]
    lag = lag_report(records, [0.0, 1.0], late_after=0.010)
    assert lag.late == 2 and lag.max_s == 0.5 and "2 of 4 requests sent more than 10 ms late" in lag.line()
