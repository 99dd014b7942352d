"""One embedded server for the load-test tests: digits, batching on, Prometheus page on."""
from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.servers import model_config_text
from tests.support.servers import REPO_ROOT, EmbeddedServer


@pytest.fixture(scope="package")
def digits_server(model_repo: Path, tmp_path_factory) -> EmbeddedServer:
    config = tmp_path_factory.mktemp("loadtest-server") / "models.config"
    config.write_text(model_config_text({"digits": model_repo / "digits"}))
    args = [f"--model_config_file={config}",
            f"--monitoring_config_file={REPO_ROOT / 'serving' / 'monitoring.config'}",
            "--enable_batching=true", f"--batching_parameters_file={REPO_ROOT / 'serving' / 'batching.cpu.config'}"]
    with EmbeddedServer(args, wait_for=["digits"], timeout=300) as server:
        yield server
