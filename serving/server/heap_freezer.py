"""Keep Python's garbage collector out of the request path.

Why: a loaded TensorFlow model leaves hundreds of thousands of Python objects
in the process (graph, ops, tensors, their dicts). Python's collector walks
every tracked object in a full collection, and allocations trigger
collections: a JSON body makes tens of thousands of lists while it is parsed,
enough to trigger full collections over all of TensorFlow's objects on most
requests (measured: docs/operations.md, "Measurements behind the embedded
server's defaults"). (The REST codec now also parses large numeric tensors
without lists, ``serving.codec._json_dense``; other bodies still make lists.)

What ``HeapFreezer`` does, all process-wide (``gc`` has one state per process):

- ``start()`` (once, when the server starts; never at import): sets the young
  generation's threshold to ``YOUNG_THRESHOLD`` allocations, so a request
  that makes tens of thousands of containers triggers a few young
  collections of at most that many objects instead of ~70, and freezes what
  exists (``gc.freeze``: moved to a permanent generation no collection walks).
- ``version_loaded()``: after a version is loaded and warmed up, before it
  serves: one full collection (the load's own garbage), then ``gc.freeze()``
  so the model's objects are never walked again, then ``release()``
  (``serving.server.memory.release_free_memory``: ``malloc_trim``) so the
  native memory the load and its warmup freed goes back to the OS.
- ``version_unloaded()``: a frozen object is never collected, so a closed
  version's reference cycles stay until unfrozen: ``gc.unfreeze()``, one full
  collection, ``gc.freeze()`` again, ``release()``. A hot swap pays one collection when the
  new version is ready and one when the old one is gone, never per request.
- ``stop()``: unfreezes and restores the thresholds found at ``start()``.

Objects made by requests are not frozen and are collected as usual (young
collections only walk the young generation; full ones only what is not
frozen). Thread-safe: loads and unloads run on worker threads.
"""
from __future__ import annotations

import gc
import logging
import threading
import time
from typing import Callable, Optional

from serving.server.memory import release_free_memory

__all__ = ["HeapFreezer", "YOUNG_THRESHOLD"]

log = logging.getLogger(__name__)

YOUNG_THRESHOLD = 10_000  # CPython's default is 700


class HeapFreezer:
    """Freezes the heap after each load; see the module docstring. ``start()`` then ``stop()``.

    ``release`` returns freed native memory to the OS after each collection
    (True when it released some); the default trims glibc's malloc arenas.
    """

    def __init__(self, young_threshold: int = YOUNG_THRESHOLD, *,
                 release: Callable[[], bool] = release_free_memory) -> None:
        if young_threshold < 1:
            raise ValueError("young_threshold must be >= 1 (0 would disable the collector)")
        self._young_threshold = young_threshold
        self._release = release
        self._previous: Optional[tuple[int, int, int]] = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Bound the young generation and freeze what exists. Idempotent."""
        with self._lock:
            if self._previous is not None:
                return
            self._previous = gc.get_threshold()
            gc.set_threshold(self._young_threshold, *self._previous[1:])
            gc.freeze()

    def version_loaded(self) -> None:
        """A version finished loading (and warmup): collect its garbage, freeze the rest."""
        self._refreeze("load", unfreeze=False)

    def version_unloaded(self) -> None:
        """A version was closed: unfreeze so its cycles can be collected, collect, freeze again."""
        self._refreeze("unload", unfreeze=True)

    def stop(self) -> None:
        """Unfreeze and restore the thresholds found at ``start()``. Idempotent."""
        with self._lock:
            if self._previous is None:
                return
            gc.unfreeze()
            gc.set_threshold(*self._previous)
            self._previous = None

    def _refreeze(self, event: str, *, unfreeze: bool) -> None:
        with self._lock:
            if self._previous is None:
                return
            start = time.perf_counter()
            if unfreeze:
                gc.unfreeze()
            collected = gc.collect()
            gc.freeze()
            released = self._release()
            log.info("After %s: collected %d objects, froze %d, %s, in %.0f ms", event, collected,
                     gc.get_freeze_count(), "returned free native memory to the OS" if released
                     else "no native memory to return", (time.perf_counter() - start) * 1e3)
