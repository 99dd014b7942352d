"""The server's native-memory rules (``serving.server.memory``): TensorFlow's environment is set before
TensorFlow loads, never over an operator's value, and freed malloc memory goes back to the OS."""
from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import platform
import sys
from pathlib import Path

import pytest

from serving.server.memory import TENSORFLOW_ENVIRONMENT, configure_tensorflow_environment, release_free_memory
from tests.server.frontend.conftest import tiny_flags  # noqa: F401 - the fixture below is re-exported
from tests.server.frontend.conftest import tiny_repo  # noqa: F401
from tests.support.servers import EmbeddedServer

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


@pytest.mark.slow
def test_the_server_process_loads_no_keras_and_trims_after_its_load(tiny_repo, tmp_path):  # noqa: F811
    if importlib.util.find_spec("sklearn") is None:
        pytest.skip("scikit-learn is not installed: Keras would not load it either way")
    with EmbeddedServer(tiny_flags(tiny_repo), wait_for=["tiny"], log_path=tmp_path / "server.log") as server:
        mapped = Path(f"/proc/{server.pid}/maps").read_text()
        log = server.log_tail(200)
    assert "TF_USE_LEGACY_KERAS=1" in log and "TF_ONEDNN_USE_SYSTEM_ALLOCATOR=1" in log
    assert "/sklearn/" not in mapped, "Keras 3 imports scikit-learn when it is installed: Keras was loaded"
    assert "After load:" in log and "native memory" in log
