"""Requests that cost far more memory than they weigh, against a real server: each is refused (or bounded)
before it runs, the server stays up, a good gRPC Predict every 100 ms keeps being answered within its
5 s deadline, the memory goes back, and no reply carries Python text.

The server serves the zoo's digits, text and ranker (their warmups measure each signature's memory per
row) and the napping model, with budgets lowered so that the cases stay a few seconds each:
1.5 GiB per request (the default is an eighth of memory), 256 MiB of REST bodies in flight, one REST
thread and a 3 s REST timeout. ``memory_attacks.py`` prints the same cases at full size as a table.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from serving.launcher import ServerProcess
from tests.support.security import memory_attacks as attacks
from tests.support.security.attacks import napping_repo

# slow: starts a server with four models, and cases take seconds; alone: its peak-RSS bounds are measured
# while no other test loads the machine (make test's second worker waits).
pytestmark = [pytest.mark.slow, pytest.mark.alone]

GIB = 1 << 30
FLAGS = (f"--max_request_memory_bytes={3 * GIB // 2}", f"--rest_api_max_body_bytes_in_flight={256 << 20}",
         "--rest_api_num_threads=1", "--rest_api_timeout_in_ms=3000")
RETAINED_LIMIT_MB = 150.0


@pytest.fixture(scope="module")
def server(model_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    napping = napping_repo(tmp_path_factory.mktemp("memory-napping")) / "napping"
    process = attacks.start(model_repo, tmp_path_factory.mktemp("memory-server"), FLAGS, {"napping": napping})
    yield process
    process.stop()


def check(row: attacks.Row, *, peak_limit_mb: float, server_errors: int = 0) -> None:
    print("\n" + attacks.table([row]), *sorted(row.details), sep="\n")
    assert not row.crashed, "the server process died"
    assert row.endings["hang"] == 0 and row.endings["5xx"] == server_errors, row.endings
    assert row.good_sent >= 2 and row.good_errors == 0, f"{row.good_errors} of {row.good_sent} good requests failed"
    assert row.peak_mb < peak_limit_mb, f"peak RSS +{row.peak_mb:.0f} MB"
    assert row.retained_mb < RETAINED_LIMIT_MB, f"RSS still +{row.retained_mb:.0f} MB after the attack"
    assert row.python_text == 0, row.details


def test_a_50_byte_broadcast_predict_is_refused_from_its_decoded_size(server):
    # 500000 x 8 x 8 x 1 floats from one float_val: 128 MB once decoded, over the gRPC receive limit that
    # bounds decoded bytes (64 MiB by default), which refuses it before the per-request memory budget
    # (its projection from warmup: tests/security/test_memory_admission.py) is asked
    row = attacks.run_case(server, "grpc-broadcast-500k")
    check(row, peak_limit_mb=100)
    assert row.endings["4xx"] == 1
    detail, = row.details
    assert "would hold 128000000 bytes once decoded" in detail and "--grpc_max_receive_message_bytes" in detail


def test_a_string_broadcast_is_counted_in_bytes(server):
    row = attacks.run_case(server, "string-broadcast-4000x1MB")
    check(row, peak_limit_mb=100)
    assert row.endings["4xx"] == 1
    assert any("would hold 4000096000 bytes once decoded" in detail and "--grpc_max_receive_message_bytes" in detail
               for detail in row.details), row.details


def test_a_98_kib_string_broadcast_under_the_memory_budget_is_refused_by_the_receive_limit(server):
    # 1.4 GB decoded: under this server's 1.5 GiB per-request budget, so only the receive limit refuses it
    row = attacks.run_case(server, "string-broadcast-14000x98KiB",
                           lambda s, r: attacks.string_broadcast(s, r, 14_000, 100_000))
    check(row, peak_limit_mb=100)
    assert row.endings["4xx"] == 1
    assert any("--grpc_max_receive_message_bytes" in detail for detail in row.details), row.details


@pytest.mark.parametrize("case", ["classify-context-grpc", "regress-context-grpc", "classify-context-rest"])
def test_a_context_copied_into_every_example_is_counted(server, case):
    row = attacks.run_case(server, case)
    check(row, peak_limit_mb=300)
    assert row.endings["4xx"] == 1
    assert any("20000 rows x" in detail and "--max_request_memory_bytes" in detail for detail in row.details)


def test_a_gzip_bomb_is_a_client_error_and_its_memory_goes_back(server):
    row = attacks.run_case(server, "gzip-bomb", lambda s, r: attacks.grpc_gzip_bomb(s, r, inflated=256 << 20))
    check(row, peak_limit_mb=200)   # inflation stops at the 64 MiB receive limit (it took 1.2 GB before)
    assert row.endings["4xx"] == 1
    assert any("Decompressed message larger than max" in detail for detail in row.details), row.details


def test_incomplete_rest_bodies_share_one_byte_budget_and_give_their_memory_back(server):
    row = attacks.run_case(server, "incomplete-bodies",
                           lambda s, r: attacks.incomplete_bodies(s, r, connections=12, size=60 << 20))
    check(row, peak_limit_mb=256 + 200)
    assert row.endings["4xx"] >= 8, row.endings   # at most 4 of 60 MiB fit in 256 MiB
    assert any("--rest_api_max_body_bytes_in_flight" in detail for detail in row.details)


def test_requests_whose_clients_have_gone_are_not_decoded_or_run(server):
    row = attacks.run_case(server, "gone-behind-a-nap", attacks.gone_behind_a_nap)
    check(row, peak_limit_mb=100)
    assert row.endings == {"ok": 1, "closed": 4}, row.endings
    assert row.model_runs == 0, (row.model_runs, row.details)
    assert row.cpu_s < 1.0, f"{row.cpu_s:.1f} CPU seconds spent on requests whose clients had gone"
