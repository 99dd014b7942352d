"""The REST front-end under attack: every case is refused or closed in bounded time, nothing crashes.

Each case (``tests/support/security/rest_attacks.py``) runs against a real embedded
server on 127.0.0.1, bounded in count and time, while a probe sends a good REST
and a good gRPC Predict every 100 ms: each must be answered within 1 s, and the
server's RSS must stay bounded. ``python tests/support/security/rest_attacks.py``
prints the same cases as a table.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.security import rest_attacks as attacks
from tests.support.security.rest_attacks import MAX_CONCURRENT, MAX_CONNECTIONS, NOFILE_LIMIT, READ_TIMEOUT_S, Outcome
from tests.support.models import export_tiny

pytestmark = pytest.mark.slow

# Within the read timeout plus one poll of the guard and the client's own scheduling on a busy machine.
CLOSED_WITHIN_S = READ_TIMEOUT_S + 2.0
RSS_GROWTH_MIB = 320  # the gzip limit (64 MiB) inflated at most twice, plus allocator slack


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("attacked")
    export_tiny(root / "tiny" / "1")
    return root


@pytest.fixture(scope="module")
def server(repo: Path):
    running = attacks.start_server(repo, workdir=repo)
    yield running
    running.stop()


def assert_unharmed(outcome: Outcome, server) -> None:
    """No crash, every good REST and gRPC request answered within 1 s, RSS bounded."""
    assert not outcome.crashed, server.log_tail()
    assert outcome.good_sent > 0
    assert outcome.good_failed == [], outcome.good_failed[:5]
    assert outcome.rss_growth_mib < RSS_GROWTH_MIB, outcome


def test_gzip_bomb_is_413_without_inflating_past_the_limit(server):
    outcome = attacks.case_gzip_bomb(server, attacks.gzip_bomb())
    assert outcome.endings == {"4xx": outcome.sent}
    assert outcome.slowest_ending_s < 5.0
    assert_unharmed(outcome, server)


@pytest.mark.parametrize("case", [attacks.case_partial_headers, attacks.case_idle_connections,
                                  attacks.case_idle_keep_alive])
def test_connections_that_send_no_whole_request_are_closed_at_the_read_timeout(server, case):
    outcome = case(server)
    assert outcome.endings == {"closed": outcome.sent}
    assert outcome.slowest_ending_s < CLOSED_WITHIN_S
    assert_unharmed(outcome, server)


@pytest.mark.parametrize("case", [attacks.case_partial_body, attacks.case_content_length_too_large])
def test_bodies_shorter_than_announced_are_408_at_the_read_timeout(server, case):
    outcome = case(server)
    assert outcome.endings == {"4xx": outcome.sent}
    assert READ_TIMEOUT_S - 0.5 < outcome.slowest_ending_s < CLOSED_WITHIN_S
    assert_unharmed(outcome, server)


def test_a_header_flood_is_refused_after_a_mebibyte(server):
    outcome = attacks.case_header_flood(server)
    assert outcome.endings["4xx"] + outcome.endings["closed"] == outcome.sent, outcome.endings  # 431, or reset
    assert outcome.slowest_ending_s < 5.0
    assert_unharmed(outcome, server)


def test_a_declared_body_over_the_limit_is_413_before_it_is_read(server):
    outcome = attacks.case_body_over_limit(server)
    assert outcome.endings == {"4xx": outcome.sent}
    assert outcome.slowest_ending_s < 1.0
    assert_unharmed(outcome, server)


@pytest.mark.parametrize("case", [attacks.case_big_integers, attacks.case_utf8_echo])
def test_the_former_500s_are_400s(server, case):
    outcome = case(server)
    assert outcome.endings == {"4xx": outcome.sent}
    assert not outcome.crashed


def test_requests_over_the_concurrency_limit_are_429_at_once_and_never_queued(server):
    outcome = attacks.case_concurrency_flood(server)
    assert outcome.endings == {"2xx": MAX_CONCURRENT, "4xx": outcome.sent - MAX_CONCURRENT}
    assert_unharmed(outcome, server)  # gRPC only: REST is what the limit refuses
    refusals = sorted(attacks.quick_refusals(server, hold_s=4.0))
    assert len(refusals) == 4 * MAX_CONCURRENT
    # Answered at once, not when a slot frees (4 s): the held requests busy-wait on both cores meanwhile.
    assert refusals[len(refusals) // 2] < 0.1 and refusals[-1] < 1.0, refusals[-5:]


def test_a_connection_flood_past_the_descriptor_limit_leaves_grpc_and_rest_serving(repo):
    server = attacks.start_server(repo, nofile=NOFILE_LIMIT)
    try:
        outcome = attacks.case_connection_flood(server, NOFILE_LIMIT + 50)
    finally:
        server.stop()
    assert outcome.endings["hang"] == 0  # every connection accepted
    assert outcome.endings["held open"] <= MAX_CONNECTIONS
    assert outcome.endings["closed"] >= outcome.sent - MAX_CONNECTIONS
    assert_unharmed(outcome, server)
