"""The server process applies ``serving.server.memory``'s rules: no Keras import, malloc arenas limited,
free native memory returned after the load (with its warmup), as its log and its memory map show."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.support.serving import tiny_flags
from tests.support.servers import EmbeddedServer


@pytest.mark.slow
def test_the_server_process_loads_no_keras_and_trims_after_its_load(tiny_repo, tmp_path):
    if importlib.util.find_spec("sklearn") is None:
        pytest.skip("scikit-learn is not installed: Keras would not load it either way")
    with EmbeddedServer(tiny_flags(tiny_repo), wait_for=["tiny"], log_path=tmp_path / "server.log") as server:
        mapped = Path(f"/proc/{server.pid}/maps").read_text()
        log = server.log_tail(200)
    assert "TF_USE_LEGACY_KERAS=1" in log and "TF_ONEDNN_USE_SYSTEM_ALLOCATOR=1" in log
    assert "/sklearn/" not in mapped, "Keras 3 imports scikit-learn when it is installed: Keras was loaded"
    assert "After load:" in log and "native memory" in log
    assert "malloc arenas" in log
