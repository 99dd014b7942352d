"""One embedded server for the load-test tests: digits, batching on, Prometheus page on."""
from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.servers import batching_config_text, model_config_text
from tests.support.servers import REPO_ROOT, EmbeddedServer


@pytest.fixture(scope="package")
def digits_server(model_repo: Path, tmp_path_factory) -> EmbeddedServer:
    workdir = tmp_path_factory.mktemp("loadtest-server")
    config = workdir / "models.config"
    config.write_text(model_config_text({"digits": model_repo / "digits"}))
    # max_batch_size covers the exporter's largest warmup batch (64), or the load fails
    batching = workdir / "batching.config"
    batching.write_text(batching_config_text({"max_batch_size": 64, "batch_timeout_micros": 0,
                                              "num_batch_threads": 2, "max_enqueued_batches": 16}))
    args = [f"--model_config_file={config}",
            f"--monitoring_config_file={REPO_ROOT / 'serving' / 'monitoring.config'}",
            "--enable_batching=true", f"--batching_parameters_file={batching}"]
    with EmbeddedServer(args, wait_for=["digits"], timeout=300) as server:
        yield server
