"""Output comparison: tight for full precision, loose plus top-1 agreement for reduced precision."""
from __future__ import annotations

import numpy as np

from exporter.compare import compare_outputs
from exporter.variants import get_variant

FP16 = get_variant("trt-fp16")
FP32 = get_variant("fp32")


def _outputs(probabilities):
    probabilities = np.asarray(probabilities, np.float32)
    return {"probabilities": probabilities, "classes": np.argmax(probabilities, -1)}


def test_reduced_precision_accepts_small_errors_and_reports_error_and_top1():
    want = _outputs([[0.7, 0.3], [0.2, 0.8], [0.6, 0.4]])
    got = _outputs([[0.69, 0.31], [0.21, 0.79], [0.61, 0.39]])
    result = compare_outputs(want, got, FP16.tolerance, top1_key="probabilities", reduced_precision=True)
    assert result.problems == []
    assert np.isclose(result.max_abs_error, 0.01, atol=1e-6) and result.top1_agreement == 1.0


def test_reduced_precision_fails_when_top1_agreement_drops_below_the_minimum():
    want = _outputs([[0.51, 0.49]] * 10)
    got = _outputs([[0.49, 0.51]] * 2 + [[0.51, 0.49]] * 8)  # within atol, but 2 of 10 flip
    result = compare_outputs(want, got, FP16.tolerance, top1_key="probabilities", reduced_precision=True)
    assert result.top1_agreement == 0.8
    assert result.problems == ["top-1 agreement of 'probabilities' is 0.800 < 0.9"]


def test_full_precision_rejects_the_same_small_errors_and_any_changed_class():
    want = _outputs([[0.51, 0.49]])
    got = _outputs([[0.49, 0.51]])
    problems = compare_outputs(want, got, FP32.tolerance, top1_key="probabilities").problems
    assert any(p.startswith("output 'probabilities': 2 of 2 values differ") for p in problems)
    assert any(p.startswith("output 'classes' differs at [0]") for p in problems)


def test_shape_and_key_mismatches_are_reported_not_raised():
    assert compare_outputs({"a": np.zeros(2)}, {"b": np.zeros(2)}, FP32.tolerance).problems == [
        "output keys differ: expected ['a'], got ['b']"]
    assert compare_outputs({"a": np.zeros(2)}, {"a": np.zeros(3)}, FP32.tolerance).problems == [
        "output 'a': expected float64[2], got float64[3]"]
