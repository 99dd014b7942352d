"""The verdict rules (``serving.rollout.verdict``) on arrays: which rule each output gets, and its limits.

Fast tier: numpy only. The same rules on real exports and a real server are in
test_canary_analysis_verdicts.py and test_canary_analysis.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from serving.rollout import analyze
from serving.rollout.verdict import FAIL, PASS, Context, Rules, judge_outputs, least_agreement, output_kind

RNG = np.random.default_rng(0)


def softmax(logits):
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def by_name(checks):
    return {c.name: c for c in checks}


@pytest.mark.parametrize("name, array, siblings, context, kind", [
    ("head", softmax(RNG.normal(size=(8, 4))), {}, Context(), "top1"),
    ("output_0", softmax(RNG.normal(size=(8, 10))), {}, Context(), "top1"),
    ("logits", RNG.normal(size=(8, 10)).astype(np.float32), {}, Context(), "top1"),
    ("anything", RNG.normal(size=(8, 3)).astype(np.float32), {}, Context(top1_outputs=("anything",)), "top1"),
    ("scores", RNG.normal(size=(8, 3)).astype(np.float32), {"classes": np.full((8, 3), b"a", object)}, Context(),
     "top1"),
    ("out", RNG.normal(size=(8, 3)).astype(np.float32), {}, Context(method_name="tensorflow/serving/classify"),
     "top1"),
    ("class_id", np.arange(8, dtype=np.int64), {}, Context(), "top1"),
    ("label", np.array([b"x"] * 8, dtype=object), {}, Context(), "top1"),
    ("score", RNG.random(size=(8, 1)).astype(np.float32), {}, Context(), "distribution"),
    ("prediction", RNG.normal(size=8).astype(np.float32), {}, Context(), "distribution"),
    ("tags", RNG.random(size=(8, 5)).astype(np.float32), {}, Context(), "distribution"),  # multi-label sigmoids
    ("user_embedding", RNG.normal(size=(8, 8)).astype(np.float32), {}, Context(), "ignore"),
], ids=["softmax", "softmax-unnamed", "logits", "manifest", "classes-scores", "classify", "class-id", "label",
        "sigmoid", "regression", "multi-label", "embedding"])
def test_each_output_gets_the_rule_of_what_it_is(name, array, siblings, context, kind):
    assert output_kind(name, {name: array, **siblings}, Rules(), context)[0] == kind


def test_a_per_output_kind_and_the_mode_override_detection():
    probabilities = softmax(RNG.normal(size=(8, 4)))
    assert output_kind("p", {"p": probabilities}, Rules(kinds={"p": "distribution"}))[0] == "distribution"
    assert output_kind("p", {"p": probabilities}, Rules(), mode="elementwise")[0] == "elementwise"
    with pytest.raises(ValueError, match="one of top1, distribution"):
        Rules(kinds={"p": "roughly"})


@pytest.mark.parametrize("rows, least", [(2, 0.5), (16, 0.8125), (32, 0.84375), (64, 0.875), (1000, 0.933)])
def test_the_agreement_limit_is_a_binomial_test_against_a_version_keeping_95_percent(rows, least):
    assert least_agreement(rows, 0.95) == pytest.approx(least, abs=1e-3)


def test_one_row_that_changed_class_out_of_32_passes_and_all_of_them_fail():
    stable = softmax(RNG.normal(size=(32, 4)))
    one_flipped = stable.copy()
    one_flipped[0] = np.roll(one_flipped[0], 1)
    if np.argmax(one_flipped[0]) == np.argmax(stable[0]):
        one_flipped[0] = np.roll(one_flipped[0], 1)
    checks, numbers = judge_outputs([{"p": stable}], [{"p": one_flipped}])
    assert by_name(checks)["agreement:p"].verdict == PASS and numbers["p"]["changed_class"] == 1
    checks, _ = judge_outputs([{"p": stable}], [{"p": np.roll(stable, 1, axis=1)}])
    assert by_name(checks)["agreement:p"].verdict == FAIL
    # the old rule: 0.99 as a plain share FAILed the single flip (31/32 = 0.969)
    assert 31 / 32 < 0.99


def test_scores_pass_a_retrain_and_fail_unrelated_or_biased_values():
    stable = RNG.normal(size=200)
    retrain = stable + RNG.normal(scale=0.3, size=200)  # p90 |diff| ~ 0.5 sd
    unrelated = RNG.permutation(stable)                 # the same values, on the wrong rows (KS cannot see it)
    biased = stable + 0.5                               # every row moved up by half a standard deviation
    for canary, verdict, over in ((retrain, PASS, ""), (unrelated, FAIL, "p90 row diff"),
                                  (biased, FAIL, "mean shift")):
        check = by_name(judge_outputs([{"s": stable}], [{"s": canary}])[0])["distribution:s"]
        assert check.verdict == verdict and over in check.detail, check


def test_the_same_weights_are_held_to_tolerance_and_a_retrain_is_not():
    stable = softmax(RNG.normal(size=(32, 4)))
    retrain = softmax(np.log(stable) + RNG.normal(scale=0.05, size=stable.shape))
    same = {"same_weights": True, "why": "same weights"}
    assert by_name(judge_outputs([{"p": stable}], [{"p": retrain}], context=Context(**same))[0])[
        "tolerance:p"].verdict == FAIL
    assert by_name(judge_outputs([{"p": stable}], [{"p": retrain}])[0])["agreement:p"].verdict == PASS


def test_the_report_names_both_sides_and_how_outputs_were_judged():
    answer = {"p": softmax(RNG.normal(size=(1, 3)))}
    replayed = analyze.Replay({"stable": [[0.01] * 30], "canary": [[0.01] * 30]},
                              {"stable": [answer], "canary": [answer]}, {"stable": [], "canary": []},
                              {"stable": 30, "canary": 30})
    report = analyze.analyze("m", replayed, context=Context(same_weights=False, why="different weights"),
                             sides={"stable": "label stable, version 1", "canary": "label canary, version 2"})
    assert report.table().splitlines()[0] == ("m: stable (label stable, version 1) vs canary (label canary, "
                                              "version 2); outputs judged: retrain (different weights)")
    assert report.to_json()["sides"]["canary"] == "label canary, version 2"


def test_both_sides_on_one_version_are_refused_and_two_versions_are_named():
    with pytest.raises(analyze.SameVersion, match="stable and canary both name version 1: nothing to compare"):
        analyze.compared_versions("m", {"stable": 1, "canary": 1})
    with pytest.raises(analyze.SameVersion):
        analyze.compared_versions("m", {"stable": 1})  # no canary label: the canary is stable
    assert analyze.compared_versions("m", {"stable": 1, "canary": 2}) == (
        1, 2, {"stable": "label stable, version 1", "canary": "label canary, version 2"})
    assert analyze.compared_versions("m", {"stable": 1, "canary": 1}, "10.0.0.9:8500")[2]["canary"] == (
        "unlabeled at 10.0.0.9:8500")  # a canary on a server of its own: its version is that server's


@pytest.mark.parametrize("mode", ["retrain", "elementwise"])
def test_nan_from_the_canary_fails_in_any_mode(mode):
    stable = RNG.normal(size=64).astype(np.float32)
    canary = stable.copy()
    canary[3] = np.nan
    checks = by_name(judge_outputs([{"s": stable}], [{"s": canary}], Rules(mode=mode))[0])
    assert checks["finite:s"].verdict == FAIL and checks["finite:s"].value == 1
