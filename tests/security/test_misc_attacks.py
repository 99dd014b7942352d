"""Metric labels, reloads that never finish, version names past int64 and undecodable text, against a real server.

Each case (``tests/support/security/misc_attacks.py``) runs beside a probe sending a good
REST and a good gRPC Predict every 100 ms; every test asserts the server is alive,
every good request was answered within its bound, RSS came back within a bound
and no reply carried Python text. ``python tests/support/security/misc_attacks.py`` prints
the same cases as the before/after table.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import grpc
import pytest
from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

from serving.launcher import ServerProcess
from tests.support.security import misc_attacks as attacks

pytestmark = pytest.mark.slow

RETAINED_MIB = 64   # allocator slack after the attack; the labels case alone held 16 MiB of names before


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("misc-attacks")
    attacks.tiny_repo(root / "repo")
    return root


@pytest.fixture(scope="module")
def server(scratch: Path) -> Iterator[ServerProcess]:
    running = attacks.start(scratch / "server", {attacks.MODEL: scratch / "repo" / attacks.MODEL})
    yield running
    running.stop(timeout=10)


def assert_unharmed(row: attacks.Row, server: ServerProcess) -> None:
    assert not row.crashed, server.log_tail()
    assert row.good_sent > 0
    assert row.good_failed == [], row.good_failed[:5]
    assert row.retained_mib < RETAINED_MIB, row.line()
    assert row.python_text == 0 and row.not_json == 0, row.line()


def test_unknown_model_names_are_counted_under_one_label_and_the_page_stays_small(server):
    row = attacks.case_labels(server, names=64, name_bytes=256 << 10)
    assert row.codes == {"NOT_FOUND": 64}
    assert row.page_bytes < 256 << 10, row.note   # 16 MiB of names before
    assert_unharmed(row, server)


def test_reloads_of_models_without_versions_release_and_the_poller_applies_the_next_config(server, scratch):
    poll = attacks.start(scratch / "poll-server", {attacks.MODEL: scratch / "repo" / attacks.MODEL},
                         "--model_config_file_poll_wait_seconds=1")
    try:
        row = attacks.case_reloads(server, scratch, poll, scratch / "poll-server" / "models.config")
    finally:
        poll.stop(timeout=10)
    # Each 2 s reload ends at its caller's deadline; each of the eight held ones is replaced by the next.
    assert row.codes.get("DEADLINE_EXCEEDED") == 4, row.codes
    assert row.codes.get("ABORTED") == 8, row.codes
    assert_unharmed(row, server)


def test_a_version_directory_beyond_int64_is_ignored_with_one_warning(scratch):
    repo = scratch / "versions-repo"
    shutil.copytree(scratch / "repo" / attacks.MODEL / "1", repo / attacks.MODEL / "1")
    server = attacks.start(scratch / "versions-server", {attacks.MODEL: repo / attacks.MODEL})
    try:
        row = attacks.case_versions(server, repo, calls=10)
        assert row.codes == {"OK": 20}
        assert_unharmed(row, server)
        # A later poll (it finds version 2) lists the directory again: still one warning.
        shutil.copytree(repo / attacks.MODEL / "1", repo / attacks.MODEL / "2")
        with grpc.insecure_channel(server.grpc_target) as channel:
            status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus
            request = get_model_status_pb2.GetModelStatusRequest()
            request.model_spec.name = attacks.MODEL
            assert attacks._wait_for(lambda: status(request, timeout=5).model_version_status[0].version == 2, 30)
        assert server.log_tail(4000).count(f"Ignoring version directory {repo / attacks.MODEL / '9'}") == 1
    finally:
        server.stop(timeout=10)


def test_undecodable_text_is_400_with_tf_serving_error_body_everywhere(server):
    row = attacks.case_text(server, rounds=2)
    assert row.c4xx == row.sent, row.codes
    assert_unharmed(row, server)
