"""Export variants: the same zoo model under another compilation or precision.

Each variant is published as its own model name so clients can compare them
side by side: fp32 → ``name``, xla → ``name_xla``, trt-fp16 → ``name_trt_fp16``
(the rule is ``serving.model_repo.published_name``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from serving.model_repo import published_name

__all__ = ["Variant", "VARIANTS", "VariantUnavailable", "get_variant"]


class VariantUnavailable(RuntimeError):
    """This machine cannot build the variant (checked before any work is done)."""


@dataclass(frozen=True)
class Variant:
    """A variant's name and output tolerances against FP32.

    ``tolerance`` holds ``atol``/``rtol`` for float outputs and ``min_top1``,
    the least fraction of rows whose predicted class must agree with FP32.
    ``reduced_precision`` variants may differ in discrete outputs (classes)
    as long as top-1 agreement holds; full-precision ones must match exactly.
    """

    name: str
    reduced_precision: bool
    tolerance: Mapping[str, float] = field(default_factory=dict)

    def published_name(self, model: str) -> str:
        """The name ``model`` is served under in this variant."""
        return published_name(model, self.name)


VARIANTS: dict[str, Variant] = {
    "fp32": Variant("fp32", False, {"atol": 1e-5, "rtol": 1e-4, "min_top1": 1.0}),
    # XLA fuses and reorders float arithmetic: same precision, rounding differs.
    "xla": Variant("xla", False, {"atol": 1e-4, "rtol": 1e-3, "min_top1": 1.0}),
    "trt-fp16": Variant("trt-fp16", True, {"atol": 5e-2, "rtol": 5e-2, "min_top1": 0.9}),
}


def get_variant(name: str) -> Variant:
    """The variant called ``name``; ValueError listing the known ones."""
    try:
        return VARIANTS[name]
    except KeyError:
        raise ValueError(f"unknown variant {name!r}; choose one of: {', '.join(VARIANTS)}") from None

