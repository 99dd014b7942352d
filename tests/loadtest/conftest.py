"""Servers for the load-test tests: digits (batching on, Prometheus page on), and a user's model without a manifest."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.loadtest.user_model import MODEL_NAME, export_user_model
from tests.support.servers import EmbeddedServer


@pytest.fixture(scope="package")
def digits_server(model_repo: Path, tmp_path_factory) -> EmbeddedServer:
    # max_batch_size covers the exporter's largest warmup batch (64), or the load fails
    batching = {"max_batch_size": 64, "batch_timeout_micros": 0, "num_batch_threads": 2, "max_enqueued_batches": 16}
    with EmbeddedServer.for_models({"digits": model_repo / "digits"}, workdir=tmp_path_factory.mktemp("loadtest-server"),
                                   batching=batching) as server:
        yield server


@pytest.fixture(scope="package")
def user_model_repo(tmp_path_factory) -> Path:
    """A repository with only ``user_mlp`` version 1: a SavedModel with no manifest (``user_model``)."""
    repo = tmp_path_factory.mktemp("user-models")
    export_user_model(repo / MODEL_NAME)
    return repo


@pytest.fixture(scope="package")
def user_model_server(user_model_repo: Path, tmp_path_factory) -> EmbeddedServer:
    """The embedded server serving ``user_mlp`` (no batching): a "remote" TF Serving for the load tests."""
    with EmbeddedServer.for_models({MODEL_NAME: user_model_repo / MODEL_NAME},
                                   workdir=tmp_path_factory.mktemp("user-model-server")) as server:
        yield server
