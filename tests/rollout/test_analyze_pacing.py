"""``analyze.replay`` through a limiter: refusals are resent within a budget and never counted as errors.

The limiter here is a token bucket on a virtual clock (the real nginx limiter is
tests/rollout/test_analyze_through_limiter.py's); the sides answer with numpy
arrays, so the verdict logic is what is tested, at no cost in time.
"""
from __future__ import annotations

import numpy as np
import pytest

from serving import status
from serving.rollout import analyze
from serving.stack.endpoint import GATEWAY_LIMIT_MESSAGE, is_gateway_refusal

BATCHES = [{"x": np.full((1, 3), i, np.float32)} for i in range(30)]


class VirtualTime:
    def __init__(self):
        self.now = 0.0

    def clock(self):
        return self.now

    def sleep(self, seconds):
        assert seconds >= 0
        self.now += seconds


class Limiter:
    """nginx's limit_req with ``burst`` and ``nodelay``: ``rate`` tokens a second, ``burst`` at most in the bucket."""

    def __init__(self, time_, rate, burst):
        self.time, self.rate, self.burst = time_, rate, burst
        self.tokens, self.at, self.refused = float(burst), 0.0, 0

    def admit(self):
        self.tokens = min(self.burst, self.tokens + (self.time.now - self.at) * self.rate)
        self.at = self.time.now
        if self.tokens < 1:
            self.refused += 1
            raise status.ResourceExhausted(GATEWAY_LIMIT_MESSAGE)
        self.tokens -= 1


def side(name, limiter, time_, answer=lambda batch: {"scores": batch["x"] * 2}):
    def predict(batch):
        limiter.admit()
        time_.now += 0.001  # the server's answer takes 1 ms
        return answer(batch)
    return analyze.Side(name, predict)


def run(rate=20.0, burst=5, pacing=analyze.Pacing(), canary_answer=None, thresholds=analyze.Thresholds()):
    time_ = VirtualTime()
    limiter = Limiter(time_, rate, burst)
    sides = [side("stable", limiter, time_),
             side("canary", limiter, time_, *(() if canary_answer is None else (canary_answer,)))]
    replayed = analyze.replay(sides, BATCHES, rounds=2, clock=time_.clock, pacing=pacing, sleep=time_.sleep)
    return analyze.analyze("m", replayed, thresholds), replayed, limiter


def checks(report):
    return {c.name: c for c in report.checks}


def test_the_limiters_refusals_are_resent_and_never_an_error():
    report, replayed, limiter = run()
    assert limiter.refused > 0  # the limiter did refuse: otherwise this test proves nothing
    assert replayed.errors == {"stable": [], "canary": []}
    assert sum(replayed.refusals.values()) == limiter.refused
    assert report.verdict == analyze.PASS, report.table()
    assert checks(report)["gateway"].verdict == analyze.PASS
    assert report.errors["stable"]["gateway_refusals"] + report.errors["canary"]["gateway_refusals"] == limiter.refused


def test_a_different_canary_still_fails_through_the_limiter():
    report, _, limiter = run(canary_answer=lambda batch: {"scores": batch["x"] * 3},
                             thresholds=analyze.Thresholds(mode="elementwise"))
    assert limiter.refused > 0
    assert report.verdict == analyze.FAIL, report.table()


def test_pacing_slows_down_to_the_limiters_rate():
    """The gap between calls grows at refusals: far fewer refusals than answers, not one per call."""
    _, replayed, limiter = run(rate=20.0, burst=5)
    answered = sum(sum(len(r) for r in rounds) for rounds in replayed.latencies.values())
    assert answered == 2 * 2 * len(BATCHES)
    assert limiter.refused < answered / 2


def test_a_spent_retry_budget_is_inconclusive_and_says_why():
    report, replayed, _ = run(rate=2.0, burst=1, pacing=analyze.Pacing(retry_budget=3))
    assert sum(replayed.unanswered.values()) > 0
    gateway = checks(report)["gateway"]
    assert gateway.verdict == analyze.INCONCLUSIVE
    assert report.verdict == analyze.INCONCLUSIVE
    table = report.table()
    assert "retry budget of 3 was spent" in table and "loadtest credential" in table
    assert checks(report)["errors"].verdict == analyze.PASS  # unanswered calls are nobody's error


def test_a_max_rate_spaces_the_calls():
    time_ = VirtualTime()
    limiter = Limiter(time_, 1000.0, 1000)
    sides = [side("stable", limiter, time_), side("canary", limiter, time_)]
    analyze.replay(sides, BATCHES[:10], rounds=1, clock=time_.clock, pacing=analyze.Pacing(max_rate=10.0),
                   sleep=time_.sleep)
    assert time_.now == pytest.approx(21 / 10.0 + 0.001, rel=0.01)  # 2 warmup calls and 20, 0.1 s apart


def test_the_servers_own_resource_exhausted_is_an_error():
    """A full batching queue is the server's refusal: the canary is held to it."""
    time_ = VirtualTime()
    limiter = Limiter(time_, 1e6, 10**6)

    def full(batch):
        raise status.ResourceExhausted("The batch scheduling queue to which this task was submitted is full")
    sides = [side("stable", limiter, time_), analyze.Side("canary", full)]
    replayed = analyze.replay(sides, BATCHES, rounds=1, clock=time_.clock, sleep=time_.sleep)
    report = analyze.analyze("m", replayed)
    assert checks(report)["errors"].verdict == analyze.FAIL
    assert "gateway" not in checks(report)


@pytest.mark.parametrize("text,expected", [
    (f"RESOURCE_EXHAUSTED: {GATEWAY_LIMIT_MESSAGE}", True),
    (f'HTTP 429: {GATEWAY_LIMIT_MESSAGE}', True),
    ("RESOURCE_EXHAUSTED: The batch scheduling queue to which this task was submitted is full", False),
    ("", False), (None, False)])
def test_is_gateway_refusal_reads_the_gateways_message(text, expected):
    assert is_gateway_refusal(text) is expected


def test_autos_decision_line_says_why_it_was_not_a_pass():
    """auto prints each decision: an INCONCLUSIVE one names the checks that made it so, with their reasons."""
    from serving.rollout.auto import Decision
    report, _, _ = run(rate=2.0, burst=1, pacing=analyze.Pacing(retry_budget=3))
    line = Decision("before traffic", 0, report.verdict, "roll back", report.to_json()).line()
    assert line.splitlines()[1].startswith("  because gateway: the gateway's limiter refused")
    assert "retry budget of 3 was spent" in line
