"""Concurrent operator commands on a live embedded server never lose or revert each other's change.

The races and their counting are ``tests/support/races.py`` (which also prints the 20-trial counts as a
script). Here each race runs a few trials and must end with every command done and nothing lost; the
poller's race runs 12 adds against a server polling its config file every second.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.races import run_race

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ranker_dir(model_repo: Path) -> Path:
    return model_repo / "ranker"


@pytest.mark.parametrize("race", ["add+add", "add+remove"])
def test_two_config_changes_at_once_both_land(race, ranker_dir, tmp_path):
    """Before: each add ABORTED the other's wait and restored the config it had read, or a remove's model came
    back (858d702: 2 of 2 trials of add+add both ABORTED, add+remove 2 of 2 reverted)."""
    tally = run_race(race, 3, tmp_path, ranker_dir)
    assert (tally.failed, tally.lost_or_reverted) == (0, 0), tally.reasons
    assert tally.succeeded == 6


def test_a_failing_add_never_reverts_a_canary(ranker_dir, tmp_path):
    """Before: the failing add pushed back the config it had read over the canary (the canary's version was
    unloaded under it)."""
    tally = run_race("canary+failing-add", 3, tmp_path, ranker_dir)
    assert (tally.succeeded, tally.lost_or_reverted) == (3, 0), tally.reasons
    assert tally.failing_add_failed == 3 and not [r for r in tally.reasons if "left it" in r]


def test_a_failing_add_that_read_before_a_canary_never_reverts_it(ranker_dir, tmp_path):
    """The defect report's order: the add reads, the canary completes (or waits for the add's lock), the add
    pushes and fails. Before: 2 of 2 canaries that had reported success were reverted (858d702)."""
    tally = run_race("failing-add+canary", 3, tmp_path, ranker_dir)
    assert (tally.succeeded, tally.lost_or_reverted) == (3, 0), tally.reasons
    assert tally.failing_add_failed == 3


def test_adds_while_the_server_polls_its_config_file_are_never_aborted_nor_lost(ranker_dir, tmp_path):
    """The file is written before the push, so a poll during the load reads the new config. Before: the CLI
    wrote it after the server had loaded, and a poll in between re-applied the old file (ABORTED)."""
    tally = run_race("add+poller", 12, tmp_path, ranker_dir)
    assert (tally.aborted, tally.failed, tally.lost_or_reverted) == (0, 0, 0), tally.reasons
    assert tally.succeeded == 12
