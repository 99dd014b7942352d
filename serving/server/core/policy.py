"""TF Serving's ``AvailabilityPreservingPolicy``: the next load or unload for one model.

Given every managed version of a model (its harness state and whether it is
still aspired), it unloads an un-aspired serving version only once an
aspired version serves (or nothing is aspired any more), and otherwise loads
the highest new aspired version. So a model never drops to zero serving
versions during a version change (``core/availability_preserving_policy.cc``).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Sequence

__all__ = ["HarnessState", "VersionSnapshot", "Action", "next_action"]


class HarnessState(enum.Enum):
    """``LoaderHarness::State``, folded: quiescing is part of UNLOADING."""

    NEW = "new"
    LOADING = "loading"
    READY = "ready"
    UNLOADING = "unloading"
    DISABLED = "disabled"
    ERROR = "error"


@dataclass(frozen=True)
class VersionSnapshot:
    version: int
    state: HarnessState
    is_aspired: bool


@dataclass(frozen=True)
class Action:
    kind: str  # "load" or "unload"
    version: int


def next_action(versions: Sequence[VersionSnapshot]) -> Optional[Action]:
    """The availability-preserving next action for one model, or None."""
    aspired = [v for v in versions if v.is_aspired]
    aspired_serving = any(v.state is HarnessState.READY for v in aspired)
    unaspired_serving = [v for v in versions
                         if not v.is_aspired and v.state is HarnessState.READY]
    if not aspired or aspired_serving or len(unaspired_serving) > 1:
        if unaspired_serving:
            return Action("unload", min(v.version for v in unaspired_serving))
    new = [v.version for v in aspired if v.state is HarnessState.NEW]
    if new:
        return Action("load", max(new))
    return None
