"""The states a model version goes through, as ``GetModelStatus`` reports them."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from serving.status import Code

__all__ = ["ManagerState", "VersionStatus"]


class ManagerState(enum.IntEnum):
    """``ModelVersionStatus.State``; values equal the proto's (``get_model_status.proto``).

    A version is START when the manager first aspires it, LOADING while its
    loader runs (retries included), AVAILABLE while it serves, UNLOADING while
    it drains, and END once unloaded or when its load failed (then
    ``VersionStatus.error_code`` is not OK).
    """

    UNKNOWN = 0
    START = 10
    LOADING = 20
    AVAILABLE = 30
    UNLOADING = 40
    END = 50


@dataclass(frozen=True)
class VersionStatus:
    """One entry of ``ServableManager.model_status``."""

    version: int
    state: ManagerState
    error_code: Code = Code.OK
    error_message: str = ""
