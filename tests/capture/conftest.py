"""Fixtures of the capture tests: the tiny model (tests.support.models) in a repository, and served in process."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from serving.server.core.manager import ServableManager
from serving.server.server import single_model_config
from serving.server.tensorflow.loader import LoaderOptions, SavedModelLoader
from tests.support.models import export_tiny
from tests.support.serving import MONITORING_PATH


@pytest.fixture(scope="session")
def tiny_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository root with model ``tiny`` at version 1 and a monitoring config (Prometheus on)."""
    root = tmp_path_factory.mktemp("capture-models")
    export_tiny(root / "tiny" / "1")
    (root / "monitoring.config").write_text(f'prometheus_config {{ enable: true, path: "{MONITORING_PATH}" }}\n')
    return root


@pytest.fixture(scope="session")
def tiny_manager(tiny_repo: Path) -> Iterator[ServableManager]:
    """A real ``ServableManager`` in this process, ``tiny`` version 1 AVAILABLE."""
    manager = ServableManager(SavedModelLoader(LoaderOptions()), file_system_poll_wait_seconds=60.0)
    manager.start()
    try:
        manager.reload_config(single_model_config("tiny", str(tiny_repo / "tiny")), timeout=120)
        yield manager
    finally:
        manager.stop(drain_timeout=5)
