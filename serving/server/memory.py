"""Native memory of the embedded server: what TensorFlow keeps after a load, and how little to keep.

Measured on resnet50 and digits, against a peer that loads the same
SavedModel with ``tf.saved_model.load`` and calls it, both on tensorflow-cpu:

- ``import tensorflow`` eagerly imports Keras 3 (``keras.src.optimizers``), and
  Keras imports scikit-learn, SciPy, matplotlib and Pillow when they are
  installed (a dev install has them). The server never uses Keras: it runs
  SavedModels in a TF1 ``Session``. ``TF_USE_LEGACY_KERAS=1`` points TensorFlow
  at ``tf_keras`` instead, which is not installed, so nothing of Keras loads:
  about 85 MB of anonymous memory and seconds of cold start less.
- With oneDNN (on by default for x86 TensorFlow), tensors of 256 KB and more
  come from ``MklCPUAllocator``'s BFC pool, which never gives memory back. The
  warmup replays the exporter's batches of up to 32 images, so the pool kept
  resnet50's batch-32 activations (~360 MB) for the life of the process.
  ``TF_ONEDNN_USE_SYSTEM_ALLOCATOR=1`` sends them to malloc instead.
- glibc keeps freed memory in its arenas; ``malloc_trim(0)`` after each load
  (and its warmup) and each unload returns the free pages to the OS
  (``release_free_memory``). ``HeapFreezer`` calls it right after its collection.
- glibc gives threads up to 8 arenas per core, and each keeps the high-water
  mark of the requests that ran on it: with the gRPC, REST and TensorFlow
  thread pools, serving resnet50 one image at a time grew the heap by ~65 MB
  more than with ``MALLOC_ARENA_MAX=2``, at the same CPU per request.
  ``limit_malloc_arenas()`` sets one arena per usable core (``mallopt``),
  unless the operator set ``MALLOC_ARENA_MAX``.

- Warmup measures each servable's memory per row with ``peak_rss_during``:
  ``malloc_trim``, ``VmRSS``, reset ``VmHWM`` (``/proc/self/clear_refs``
  ``5``), run, read ``VmHWM``. On digits this gave 16.5 KiB per row from
  1,024 to 16,384 rows (``serving.server.admission`` projects requests from it).
  It is process-wide: a request running meanwhile adds to the figure (loads
  measure one at a time), and it resets the process's ``VmHWM``, so a peak
  read from outside spans from the last load on.

``configure_tensorflow_environment()`` sets both variables' defaults (an
operator's own values win). TensorFlow reads them when it is imported or first
allocates, so ``main()`` calls it and ``limit_malloc_arenas()`` when the
process starts, before TensorFlow loads and the thread pools start; importing
this module changes nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import sys
import threading
from typing import Callable, MutableMapping, Optional, TypeVar

T = TypeVar("T")

__all__ = ["TENSORFLOW_ENVIRONMENT", "configure_tensorflow_environment", "limit_malloc_arenas",
           "release_free_memory", "peak_rss_during"]

log = logging.getLogger(__name__)

TENSORFLOW_ENVIRONMENT: dict[str, str] = {
    "TF_USE_LEGACY_KERAS": "1",  # no Keras import: tf_keras is not installed (see the module docstring)
    "TF_ONEDNN_USE_SYSTEM_ALLOCATOR": "1",  # no BFC pool holding warmup's peak: malloc, trimmed after loads
}


def configure_tensorflow_environment(environ: MutableMapping[str, str]) -> dict[str, str]:
    """Set ``TENSORFLOW_ENVIRONMENT``'s defaults in ``environ`` (values already there stay); what was set.

    Effective only before TensorFlow is imported: if it already is, nothing is
    set and a warning says so.
    """
    if "tensorflow" in sys.modules:
        log.warning("TensorFlow was imported before the server configured it; %s not set",
                    ", ".join(TENSORFLOW_ENVIRONMENT))
        return {}
    applied = {name: value for name, value in TENSORFLOW_ENVIRONMENT.items() if name not in environ}
    environ.update(applied)
    return applied


_M_ARENA_MAX = -8  # malloc.h


def limit_malloc_arenas(environ: MutableMapping[str, str], arenas: Optional[int] = None) -> Optional[int]:
    """At most ``arenas`` malloc arenas (default: one per usable core, at least 2); the limit set.

    None when ``MALLOC_ARENA_MAX`` is in ``environ`` (glibc applied the
    operator's value at process start) or the C library is not glibc. Threads
    that start later share the arenas; ones that exist keep theirs.
    """
    if "MALLOC_ARENA_MAX" in environ:
        return None
    libc = _glibc()
    if libc is None:
        return None
    limit = arenas if arenas is not None else max(2, len(os.sched_getaffinity(0)))
    if limit < 1:
        raise ValueError(f"arenas must be >= 1, not {limit}")
    return limit if libc.mallopt(_M_ARENA_MAX, limit) == 1 else None


@functools.cache
def _glibc() -> Optional[ctypes.CDLL]:
    """The C library when it has ``malloc_trim`` (glibc), else None; loaded on first use."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    if libc is None or not hasattr(libc, "malloc_trim"):
        return None
    libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return libc


def release_free_memory() -> bool:
    """``malloc_trim(0)``: return the free pages of every malloc arena to the OS.

    True when glibc released some memory; False when there was none to release
    or the C library is not glibc (musl has no arenas to trim). Thread-safe
    (glibc locks each arena); it costs a walk over the free lists, so it runs
    after loads and unloads, never per request.
    """
    libc = _glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


_PEAK_LOCK = threading.Lock()


def _status_bytes(field: str) -> Optional[int]:
    try:
        with open("/proc/self/status") as status_file:
            for line in status_file:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def peak_rss_during(run: Callable[[], T]) -> tuple[T, Optional[int]]:
    """``run()``'s result and how far the process's peak RSS rose above its RSS while it ran.

    The free heap is trimmed first and ``VmHWM`` reset to ``VmRSS``
    (``/proc/self/clear_refs``), so the figure is the memory ``run`` touched (one measurement at a time);
    None where Linux's ``/proc`` does not allow it. Process-wide: costs a trim
    and three ``/proc`` reads, so it is for loads, never per request.
    """
    with _PEAK_LOCK:   # the peak is the process's: two loads measuring at once would count each other
        release_free_memory()
        before = _status_bytes("VmRSS")
        try:
            with open("/proc/self/clear_refs", "w") as clear_refs:
                clear_refs.write("5")
        except OSError:
            before = None
        result = run()
        peak = _status_bytes("VmHWM") if before is not None else None
    return result, (None if peak is None or before is None else max(0, peak - before))
