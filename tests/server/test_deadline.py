"""``serving.server.deadline``: no deadline, or one beyond a year (the platform's range), is none."""
from __future__ import annotations

import math
import time

import pytest

from serving import status
from serving.server.deadline import MAX_DEADLINE_SECONDS, deadline_after, remaining_seconds, request_deadline


@pytest.mark.parametrize("seconds", [None, math.nan, math.inf, MAX_DEADLINE_SECONDS + 1, 9.2e18])
def test_no_deadline_nan_infinite_or_beyond_a_year_is_none(seconds):
    assert deadline_after(seconds) is None


def test_a_finite_deadline_is_absolute_monotonic_time():
    before = time.monotonic()
    deadline = deadline_after(5.0)
    assert before + 5.0 <= deadline <= time.monotonic() + 5.0
    with request_deadline(deadline):
        assert 0 < remaining_seconds() <= 5.0
    assert remaining_seconds() is None


@pytest.mark.parametrize("deadline", [math.inf, math.nan, 9.2e18])
def test_request_deadline_treats_an_unreachable_deadline_as_none(deadline):
    with request_deadline(deadline):
        assert remaining_seconds() is None


@pytest.mark.parametrize("deadline", [-math.inf, 0.0])
def test_a_deadline_already_past_is_deadline_exceeded_before_any_work(deadline):
    with pytest.raises(status.DeadlineExceeded):
        with request_deadline(deadline):
            pytest.fail("the request must not run")
