"""Fixtures: the tiny model exported once per session, and helpers to run the embedded server on it."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.server.frontend.tiny import export_tiny

MONITORING_PATH = "/monitoring/prometheus/metrics"


@pytest.fixture(scope="session")
def tiny_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository root with model ``tiny`` at version 1 (exported in a subprocess-free TF call)."""
    root = tmp_path_factory.mktemp("frontend-models")
    export_tiny(root / "tiny" / "1")
    (root / "monitoring.config").write_text(f'prometheus_config {{ enable: true, path: "{MONITORING_PATH}" }}\n')
    return root


def tiny_flags(repo: Path, *extra: str) -> list[str]:
    """TF Serving flags serving ``tiny`` from ``repo`` with Prometheus on."""
    return ["--model_name=tiny", f"--model_base_path={repo / 'tiny'}",
            f"--monitoring_config_file={repo / 'monitoring.config'}", *extra]
