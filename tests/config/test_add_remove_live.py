"""``python -m serving.config add|remove|render`` against a running embedded server.

The server is started the way make up's embedded backend leaves it (a served
config in a work dir, ``stack.json`` naming it and the server; the labelled
startup config needs ``--allow_version_labels_for_unavailable_models``, as in
the compose command). The added model is a cached zoo export under a name the
zoo does not have, in a directory outside the model repository.
"""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from serving.config import load_model_server_config
from serving.config.models import render_repository_config, write_model_server_config
from serving.config.served_config import STATE_FILE, StackState, write_state
from tests.support.config import run_cli
from tests.support.servers import EmbeddedServer

pytestmark = pytest.mark.slow


def config_cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args, timeout=300)


def versions(rest: str, path: str) -> list[tuple[str, str]]:
    response = httpx.get(f"{rest}/v1/models/{path}", timeout=30)
    assert response.status_code == 200, response.text
    return [(v["version"], v["state"]) for v in response.json()["model_version_status"]]


def unloaded(rest: str, model: str, timeout: float = 60.0) -> bool:
    """Whether every version of ``model`` reaches END (TF Serving keeps reporting a removed model's
    versions as END) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = httpx.get(f"{rest}/v1/models/{model}", timeout=30)
        if response.status_code == 404 or {v["state"] for v in response.json()["model_version_status"]} == {"END"}:
            return True
        time.sleep(0.25)
    return False


@pytest.fixture
def stack(model_repo: Path, tmp_path: Path):
    repo = tmp_path / "models"
    shutil.copytree(model_repo / "digits", repo / "digits")
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(model_repo / "ranker" / "1", elsewhere / "my_ranker" / "1")
    work = tmp_path / "work"
    work.mkdir()
    config = work / "models.config"
    write_model_server_config(render_repository_config(repo), config)
    with EmbeddedServer([f"--model_config_file={config}", "--allow_version_labels_for_unavailable_models=true"],
                        wait_for=["digits"], log_path=work / "server.log",
                        timeout=240) as server:
        write_state(StackState("embedded", config, server.grpc_target, server.rest_url, repo), work / STATE_FILE)
        yield {"server": server, "work": work, "config": config, "model_dir": elsewhere / "my_ranker"}


def test_an_added_model_is_served_under_its_labels_and_a_removed_one_unloads(stack):
    server, work = stack["server"], str(stack["work"])
    proc = config_cli("add", "my_ranker", "--base-path", str(stack["model_dir"]), "--work-dir", work)
    assert proc.returncode == 0, proc.stderr + server.log_tail()
    assert f"added my_ranker to {stack['config']} (served by {server.grpc_target})" in proc.stdout
    for path in ("my_ranker", "my_ranker/labels/stable", "my_ranker/labels/canary"):
        assert versions(server.rest_url, path) == [("1", "AVAILABLE")]
    entry = load_model_server_config(stack["config"]).model_config_list.config[-1]
    assert (entry.name, entry.base_path) == ("my_ranker", str(stack["model_dir"]))
    rendered = config_cli("render", "--work-dir", work)
    assert 'name: "my_ranker"' in rendered.stdout

    proc = config_cli("remove", "my_ranker", "--work-dir", work)
    assert proc.returncode == 0, proc.stderr + server.log_tail()
    assert unloaded(server.rest_url, "my_ranker")
    assert [e.name for e in load_model_server_config(stack["config"]).model_config_list.config] == ["digits"]


def test_a_base_path_without_versions_is_refused_and_the_server_keeps_taking_reloads(stack, tmp_path):
    server, work = stack["server"], str(stack["work"])
    (tmp_path / "not_exported").mkdir()
    before = stack["config"].read_text()
    proc = config_cli("add", "not_exported", "--base-path", str(tmp_path / "not_exported"), "--work-dir", work)
    assert proc.returncode == 1
    assert f"no version directory under {tmp_path / 'not_exported'}" in proc.stderr
    assert stack["config"].read_text() == before
    assert "not_exported" not in server.log_tail(400)  # never sent
    assert versions(server.rest_url, "digits/labels/stable") == [("1", "AVAILABLE")]
    proc = config_cli("add", "my_ranker", "--base-path", str(stack["model_dir"]), "--work-dir", work, "--timeout", "120")
    assert proc.returncode == 0, proc.stderr + server.log_tail()  # a reload after the refusal is not wedged
    assert versions(server.rest_url, "my_ranker") == [("1", "AVAILABLE")]
