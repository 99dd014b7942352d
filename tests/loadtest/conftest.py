"""One embedded server for the load-test tests: digits, batching on, Prometheus page on."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.servers import EmbeddedServer


@pytest.fixture(scope="package")
def digits_server(model_repo: Path, tmp_path_factory) -> EmbeddedServer:
    # max_batch_size covers the exporter's largest warmup batch (64), or the load fails
    batching = {"max_batch_size": 64, "batch_timeout_micros": 0, "num_batch_threads": 2, "max_enqueued_batches": 16}
    with EmbeddedServer.for_models({"digits": model_repo / "digits"}, workdir=tmp_path_factory.mktemp("loadtest-server"),
                                   batching=batching) as server:
        yield server
