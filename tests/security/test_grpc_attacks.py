"""gRPC attacks on the embedded server: each is refused with a client error, the server
stays up with its memory bounded, and a good request is still answered within 1 s meanwhile.

The table (before/after) comes from ``python -m tests.support.security.attacks``; these tests assert
on the same ``run_case`` results, one case each.
"""
from __future__ import annotations

import re

import grpc
import pytest

from tests.support.security.attacks import CASES, AttackCase, format_table, python_internals, run_case

pytestmark = pytest.mark.slow   # starts two servers; each case runs a few seconds

RSS_GROWTH_LIMIT_MB = 200.0
INTERNAL_MESSAGE = re.compile(r"Internal error while handling Predict \(request id [0-9a-f]{16}\); "
                              r"see the server log")


def check_bounded(result) -> None:
    print("\n" + format_table([result]))
    assert not result.crashed, "the server process died"
    assert result.count("hang") == 0, "a request got no answer"
    assert result.rss_growth_mb < RSS_GROWTH_LIMIT_MB, f"server RSS grew {result.rss_growth_mb:.0f} MB"
    assert len(result.good) >= 2 and not result.good_failures, \
        f"good requests failed or took over 1 s: {result.good_failures[:3]}"
    assert not result.leaks, [o.details for o in result.outcomes]


@pytest.mark.parametrize("case", [c for c in CASES if not c.high_cap], ids=lambda c: c.name)
def test_attack_is_refused_with_a_client_error_and_the_server_stays_up(server, case: AttackCase):
    result = run_case(server, case)
    check_bounded(result)
    assert result.as_expected, [(o.code.name, o.details) for o in result.outcomes]
    if case.expected != {grpc.StatusCode.OK} and case.past_cap:
        for outcome in result.outcomes:
            assert "--max_tensor_elements" in outcome.details and "elements per request" in outcome.details


def test_a_server_failure_is_internal_with_a_request_id_and_no_python_text(high_cap_server):
    case, = (c for c in CASES if c.high_cap)
    result = run_case(high_cap_server, case)
    check_bounded(result)
    outcome, = result.outcomes
    assert outcome.code == grpc.StatusCode.INTERNAL and INTERNAL_MESSAGE.fullmatch(outcome.details), outcome
    request_id = outcome.details.split("request id ")[1].split(")")[0]
    log = high_cap_server.log_tail(400)
    assert request_id in log and "MemoryError" in log   # the details are in the server's log, under the id


@pytest.mark.parametrize("message, leaks", [
    ("OverflowError: timestamp out of range for platform time_t", True),
    ("MemoryError: Unable to allocate 238. GiB", True),
    ('Traceback (most recent call last):\n  File "x.py"', True),
    ("Internal error while running the model (request id 0123456789abcdef); see the server log", False),
    ("Task size 100000 is larger than maximum input batch size 32", False),
])
def test_python_internals_are_recognised(message, leaks):
    assert python_internals(message) is leaks
