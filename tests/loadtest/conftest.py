"""Servers for the load-test tests: digits (batching on, Prometheus page on), and a user's model without a manifest."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.user_model import MODEL_NAME, export_user_model
from tests.support.cli import run_loadtest
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


@pytest.fixture(scope="package")
def user_model_tune(user_model_repo: Path, tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """One bounded tuner run over ``user_mlp`` (no manifest): two candidates (intra-op threads, batching), each on
    a server of its own, with the default server kept up. Its output and directory; tests assert on different
    parts of it (a tuner run restarts servers and takes most of a minute)."""
    out_dir = tmp_path_factory.mktemp("tune")
    out = run_loadtest("tune", "--model-repo", str(user_model_repo), "--model", MODEL_NAME, "--p99-budget-ms", "2000",
                       "--max-trials", "2", "--dimensions", "intra_op,batching", "--grid", '{"intra_op": [0, 1]}',
                       "--concurrency", "1,2", "--window", "0.5", "--max-level-time", "2", "--rounds", "1",
                       "--final-rounds", "1", "--out", str(out_dir), timeout=400)
    assert out.returncode == 0, out.stdout + out.stderr
    return out, out_dir
