"""Compare a signature's outputs against reference outputs, within a variant's tolerance."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

import numpy as np

__all__ = ["Comparison", "compare_outputs"]


@dataclass
class Comparison:
    """Result of comparing one signature's outputs: measures and the broken rules."""

    max_abs_error: float = 0.0
    top1_agreement: Optional[float] = None
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"max_abs_error": self.max_abs_error, "top1_agreement": self.top1_agreement}


def _float_problem(key: str, expected: np.ndarray, actual: np.ndarray, atol: float, rtol: float) -> Optional[str]:
    bad = ~np.isclose(actual, expected, atol=atol, rtol=rtol, equal_nan=True)
    if not bad.any():
        return None
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"output {key!r}: {int(bad.sum())} of {bad.size} values differ beyond atol={atol:g}, "
            f"rtol={rtol:g}; first at {list(index)}: expected {expected[index]!r}, got {actual[index]!r}")


def compare_outputs(expected: Mapping[str, np.ndarray], actual: Mapping[str, np.ndarray],
                    tolerance: Mapping[str, float], *, top1_key: Optional[str] = None,
                    reduced_precision: bool = False) -> Comparison:
    """Check ``actual`` against ``expected`` output by output.

    Float outputs must be close (``atol``/``rtol``); other outputs must be
    equal, except under ``reduced_precision``, where discrete outputs may
    differ as long as top-1 agreement (argmax of ``top1_key``) reaches
    ``min_top1``. Keys, shapes and dtypes must always match.
    """
    result = Comparison()
    if set(expected) != set(actual):
        result.problems.append(f"output keys differ: expected {sorted(expected)}, got {sorted(actual)}")
        return result
    for key in sorted(expected):
        want, got = np.asarray(expected[key]), np.asarray(actual[key])
        if want.shape != got.shape or want.dtype.kind != got.dtype.kind:
            result.problems.append(f"output {key!r}: expected {want.dtype}{list(want.shape)}, "
                                   f"got {got.dtype}{list(got.shape)}")
            continue
        if want.dtype.kind == "f":
            result.max_abs_error = max(result.max_abs_error,
                                       float(np.max(np.abs(got.astype(np.float64) - want), initial=0.0)))
            problem = _float_problem(key, want, got, tolerance["atol"], tolerance["rtol"])
        elif reduced_precision or np.array_equal(want, got):
            problem = None
        else:
            index = tuple(int(i) for i in np.argwhere(want != got)[0])
            problem = f"output {key!r} differs at {list(index)}: expected {want[index]!r}, got {got[index]!r}"
        if problem:
            result.problems.append(problem)
    if top1_key is not None and top1_key in expected:
        result.top1_agreement = float(np.mean(np.argmax(expected[top1_key], -1) == np.argmax(actual[top1_key], -1)))
        if result.top1_agreement < tolerance.get("min_top1", 1.0):
            result.problems.append(f"top-1 agreement of {top1_key!r} is {result.top1_agreement:.3f} "
                                   f"< {tolerance.get('min_top1', 1.0)}")
    return result
