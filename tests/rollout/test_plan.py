"""Planning label moves: every step is a config TF Serving accepts."""
from __future__ import annotations

import pytest

from serving.config.models import render_model_server_config
from serving.model_repo import ZOO
from serving.rollout import (
    RolloutError,
    canary_labels,
    plan_label_move,
    promote_labels,
    rollback_labels,
    served_versions,
)
from serving.rollout.plan import find_model


def config(versions=(1,), stable=1, canary=1):
    cfg = render_model_server_config([m for m in ZOO if m.name in ("digits", "text")])
    entry = find_model(cfg, "digits")
    entry.model_version_policy.specific.ClearField("versions")
    entry.model_version_policy.specific.versions.extend(versions)
    entry.version_labels.update({"stable": stable, "canary": canary})
    return cfg


def state(cfg, name="digits"):
    entry = find_model(cfg, name)
    return served_versions(entry), dict(entry.version_labels)


def assert_labels_only_on_versions_served_before(steps, start):
    """TF Serving's rule, step by step: a moved label targets a version the previous step served."""
    previous = start
    for step in steps:
        before_versions, before_labels = state(previous)
        versions, labels = state(step.config)
        for label, version in labels.items():
            assert version in versions
            if before_labels.get(label) != version:
                assert version in before_versions, f"{step.description}: {label} -> {version} not loaded yet"
        previous = step.config


def test_canary_loads_the_new_version_then_moves_the_label():
    start = config()
    steps = plan_label_move(start, "digits", canary_labels(start, "digits", 2))
    assert [state(s.config) for s in steps] == [
        ([1, 2], {"stable": 1, "canary": 1}),
        ([1, 2], {"stable": 1, "canary": 2}),
    ]
    assert steps[0].wait_for == (1, 2)
    assert_labels_only_on_versions_served_before(steps, start)


def test_rollback_moves_canary_back_before_unloading_its_version():
    start = config(versions=(1, 2), canary=2)
    steps = plan_label_move(start, "digits", rollback_labels(start, "digits"))
    assert [state(s.config) for s in steps] == [
        ([1, 2], {"stable": 1, "canary": 1}),
        ([1], {"stable": 1, "canary": 1}),
    ]
    assert_labels_only_on_versions_served_before(steps, start)


def test_promote_moves_stable_then_unloads_the_old_version():
    start = config(versions=(1, 2), canary=2)
    steps = plan_label_move(start, "digits", promote_labels(start, "digits"))
    assert [state(s.config) for s in steps] == [
        ([1, 2], {"stable": 2, "canary": 2}),
        ([2], {"stable": 2, "canary": 2}),
    ]


def test_replacing_a_canary_keeps_stable_and_drops_the_old_canary_last():
    start = config(versions=(1, 2), canary=2)
    steps = plan_label_move(start, "digits", canary_labels(start, "digits", 3))
    assert [state(s.config) for s in steps] == [
        ([1, 2, 3], {"stable": 1, "canary": 2}),
        ([1, 2, 3], {"stable": 1, "canary": 3}),
        ([1, 3], {"stable": 1, "canary": 3}),
    ]
    assert_labels_only_on_versions_served_before(steps, start)


def test_a_move_that_changes_nothing_plans_no_step():
    start = config()
    assert plan_label_move(start, "digits", rollback_labels(start, "digits")) == []


def test_other_models_are_left_untouched_in_every_step():
    start = config()
    for step in plan_label_move(start, "digits", canary_labels(start, "digits", 2)):
        assert find_model(step.config, "text") == find_model(start, "text")


def test_planning_does_not_modify_the_input_config():
    start = config()
    before = start.SerializeToString()
    plan_label_move(start, "digits", canary_labels(start, "digits", 2))
    assert start.SerializeToString() == before


def test_unknown_model_and_latest_policy_are_refused():
    start = config()
    with pytest.raises(RolloutError, match="'nope' is not in the config"):
        canary_labels(start, "nope", 2)
    find_model(start, "digits").model_version_policy.latest.num_versions = 1
    with pytest.raises(RolloutError, match="no `specific` version policy"):
        plan_label_move(start, "digits", {"stable": 1, "canary": 2})
