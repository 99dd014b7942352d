"""Per-version bookkeeping of the manager (TF Serving's ``LoaderHarness``).

A harness holds one version's state, its loader and servable once loaded, how many
requests currently hold it, whether it is still aspired, and the event that
cancels its load retries. It has no lock of its own: every field is read and
written under the manager's lock.
"""
from __future__ import annotations

import threading
from typing import Generic, Optional, TypeVar

from serving import status
from serving.server.core.loader import Loader
from serving.server.core.policy import HarnessState, VersionSnapshot

__all__ = ["VersionHarness"]

ServableT = TypeVar("ServableT")


class VersionHarness(Generic[ServableT]):
    """One managed version of one model. Guarded by the owning manager's lock."""

    def __init__(self, name: str, version: int, path: str) -> None:
        self.name = name
        self.version = version
        self.path = path
        self.state = HarnessState.NEW
        self.is_aspired = True
        self.loader: Optional[Loader[ServableT]] = None   # set once loaded, until unloaded
        self.servable: Optional[ServableT] = None
        self.holders = 0
        self.error: Optional[status.ServingError] = None
        self.cancelled = threading.Event()

    @property
    def id(self) -> str:
        """TF Serving's ``ServableId::DebugString``."""
        return f"{{name: {self.name} version: {self.version}}}"

    def snapshot(self) -> VersionSnapshot:
        return VersionSnapshot(self.version, self.state, self.is_aspired)
