"""Fixtures: the tiny model exported once per session, and helpers to run the embedded server on it
and to wait for what it shows (a metric, a listener closing) instead of sleeping."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import httpx
import pytest

from tests.server.frontend.tiny import export_tiny
from tests.support.servers import EmbeddedServer

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


def metric_total(server: EmbeddedServer, name: str) -> float:
    """``name`` summed over its label sets, read from the server's Prometheus page."""
    page = httpx.get(server.rest_url + MONITORING_PATH, timeout=60).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in page.splitlines()
               if line.split("{", 1)[0].split(" ", 1)[0] == name)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``condition`` (something the server shows) until it holds; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)
