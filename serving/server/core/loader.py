"""What the manager needs to load one version: TF Serving's ``core/loader.h``, without TensorFlow.

A ``Loader`` is built for one servable version (name, version, path) by a
``LoaderFactory`` (TF Serving's ``SourceAdapter``: a storage path in, a loader
out) that the composition root injects into ``ServableManager``; the
TensorFlow one is ``serving.server.tensorflow.loader.SavedModelLoader``.
``core/`` knows the servable only as the opaque value ``servable()`` returns.

Contract, as ``loader.h`` states it:

- ``estimate_resources()`` may be called before ``load()``, any number of
  times, and must not change after it: the RAM in bytes the version will
  take once loaded (an estimate, from the files on disk).
- ``load()`` makes ONE attempt and raises ``serving.status.ServingError`` on
  failure; the manager retries by calling it again (``LoaderHarness``).
- ``servable()`` is valid between a ``load()`` that returned and ``unload()``.
- ``unload()`` frees what ``load()`` took; it is called once, after the last
  request holding the servable has released it.

The manager calls one loader from one worker thread at a time; different
versions' loaders run concurrently.
"""
from __future__ import annotations

from typing import Callable, Protocol, TypeVar

__all__ = ["Loader", "LoaderFactory"]

ServableT = TypeVar("ServableT", covariant=True)


class Loader(Protocol[ServableT]):
    """Loads, serves and unloads one servable version. See the module docstring for the contract."""

    def estimate_resources(self) -> int:
        """The RAM in bytes the version will take once loaded."""

    def load(self) -> None:
        """Load the version (one attempt); ``status.ServingError`` on failure."""

    def unload(self) -> None:
        """Free what ``load`` took; the servable is not used after this."""

    def servable(self) -> ServableT:
        """The loaded servable (valid after ``load`` returned, until ``unload``)."""


LoaderFactory = Callable[[str, int, str], Loader]
"""``(name, version, path) -> Loader``: the loader of one aspired version (TF Serving's SourceAdapter)."""
