"""The server's native-memory rules (``serving.server.memory``): TensorFlow's environment is set before
TensorFlow loads, never over an operator's value; freed malloc memory goes back to the OS; arenas are
limited unless the operator chose. The server process itself: tests/server/frontend/test_server_memory.py."""
from __future__ import annotations

import ctypes
import ctypes.util
import platform
import sys

import pytest

from serving.server.memory import (
    TENSORFLOW_ENVIRONMENT,
    configure_tensorflow_environment,
    limit_malloc_arenas,
    release_free_memory,
)

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")


def test_defaults_are_set_before_tensorflow_loads_and_an_operators_value_wins(monkeypatch):
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)  # as in a fresh server process
    environ = {"TF_USE_LEGACY_KERAS": "0"}
    applied = configure_tensorflow_environment(environ)
    assert environ == {**TENSORFLOW_ENVIRONMENT, "TF_USE_LEGACY_KERAS": "0"}
    assert "TF_USE_LEGACY_KERAS" not in applied and applied["TF_ONEDNN_USE_SYSTEM_ALLOCATOR"] == "1"


def test_nothing_is_set_once_tensorflow_is_imported(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "tensorflow", object())  # TensorFlow read its environment already
    environ: dict[str, str] = {}
    assert configure_tensorflow_environment(environ) == {} and environ == {}
    assert "TensorFlow was imported before the server configured it" in caplog.text


@glibc_only
def test_free_malloc_memory_inside_the_heap_is_returned_to_the_os():
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(64 << 10) for _ in range(512)]  # 32 MB below the mmap threshold: heap memory
    pin = libc.malloc(64)  # keeps the freed blocks inside the heap, where free() alone never trims
    try:
        for block in blocks:
            libc.free(block)
        assert release_free_memory() is True
    finally:
        libc.free(pin)


@glibc_only
def test_malloc_arenas_are_limited_unless_the_operator_set_malloc_arena_max():
    assert limit_malloc_arenas({"MALLOC_ARENA_MAX": "4"}) is None
    assert limit_malloc_arenas({}, arenas=64) == 64  # a limit this process never reaches
    with pytest.raises(ValueError, match="arenas must be >= 1"):
        limit_malloc_arenas({}, arenas=0)
