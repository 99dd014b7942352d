"""The availability-preserving policy, decision by decision."""
from __future__ import annotations

from serving.server.core.policy import Action, next_action
from serving.server.core.policy import HarnessState as S
from serving.server.core.policy import VersionSnapshot as V


def test_new_aspired_version_loads_while_the_old_one_keeps_serving():
    assert next_action([V(1, S.READY, False), V(2, S.NEW, True)]) == Action("load", 2)


def test_old_version_is_not_unloaded_before_the_new_one_is_ready():
    assert next_action([V(1, S.READY, False), V(2, S.LOADING, True)]) is None


def test_old_version_is_unloaded_once_an_aspired_version_serves():
    assert next_action([V(1, S.READY, False), V(2, S.READY, True)]) == Action("unload", 1)


def test_a_failed_new_version_never_takes_down_the_serving_one():
    assert next_action([V(1, S.READY, False), V(2, S.ERROR, True)]) is None


def test_with_nothing_aspired_every_serving_version_is_unloaded_lowest_first():
    assert next_action([V(3, S.READY, False), V(2, S.READY, False)]) == Action("unload", 2)


def test_the_highest_new_version_loads_first():
    assert next_action([V(1, S.NEW, True), V(3, S.NEW, True), V(2, S.NEW, True)]) == Action("load", 3)
