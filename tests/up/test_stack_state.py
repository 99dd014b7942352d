"""`make up` (embedded) serves the model repository from a config that survives restarts, and the
rollout and `serving.config` commands default to what it runs.

Each test starts `python -m serving.stack --backend embedded` on a copy of a repository (free ports, its
own work dir) and waits for "every model is loaded". The README's own rollout commands run as written
in tests/readme/test_readme_commands.py.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import httpx
import pytest

from serving.checkout import REPO_ROOT
from serving.client import RestClient
from serving.config import load_model_server_config
from serving.config.served_config import STATE_FILE, read_state
from tests.support.ports import free_port
from tests.support.processes import MakeUpEmbedded

pytestmark = pytest.mark.slow
LOADED = "every model is loaded"


class MakeUp(MakeUpEmbedded):
    """`python -m serving.stack --backend embedded` on free ports, until every model is loaded."""

    def __init__(self, repo: Path, work: Path, *extra: str) -> None:
        super().__init__(repo, work, f"127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}",
                         work.parent / f"up-{time.monotonic_ns()}.log", 300, *extra)

    def __enter__(self) -> "MakeUp":
        self.start(lambda: LOADED in self.text(), "make up", 400, every=0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.stop(60) == 0, self.text()[-3000:]

    def available(self, model: str) -> list[int]:
        """The AVAILABLE versions of ``model`` (REST model status; [] when the server does not know it)."""
        response = httpx.get(f"{self.rest}/v1/models/{model}", timeout=30)
        if response.status_code == 404:
            return []
        assert response.status_code == 200, response.text
        return sorted(int(v["version"]) for v in response.json()["model_version_status"] if v["state"] == "AVAILABLE")

    def available_or_none(self, model: str) -> Optional[list[int]]:
        """:meth:`available`, or None when nothing answers on the REST port."""
        try:
            return self.available(model)
        except httpx.TransportError:
            return None

    def label(self, model: str, label: str) -> int:
        """The version the server resolves ``label`` to (GetModelMetadata answers with it)."""
        with RestClient(self.rest) as client:
            return client.metadata(model, label=label).version


def run(module: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"{module} {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture
def repo(model_repo: Path, tmp_path: Path) -> Path:
    """digits and text, version 1 each (copies of the cached exports)."""
    dest = tmp_path / "models"
    for name in ("digits", "text"):
        shutil.copytree(model_repo / name, dest / name)
    return dest


def test_the_first_start_serves_the_repository_and_records_the_stack(repo, tmp_path):
    work = tmp_path / "work"
    with MakeUp(repo, work) as up:
        assert (up.available("digits"), up.label("digits", "stable")) == ([1], 1)
        assert (up.available("text"), up.label("text", "canary")) == ([1], 1)
        assert "exporting" not in up.text()  # the repository is not empty: no zoo export
        state = read_state(work / STATE_FILE)
        assert (state.backend, state.models_config, state.grpc, state.rest, state.model_repo) == (
            "embedded", work / "models.config", up.grpc, up.rest, repo.resolve())
        assert f"python -m serving.rollout status --model digits --work-dir {work}" in up.text()
        # make down stops it (make up, then its server, exit), and says so; again, that nothing runs.
        assert "make down: stopped" in run("serving.stack", "down", "--work-dir", str(work))
        assert up.proc.wait(60) == 0
        assert "stopped (server exit status 0)" in up.text()
        assert "nothing runs" in run("serving.stack", "down", "--work-dir", str(work))
        assert up.available_or_none("digits") is None


def test_added_models_moved_labels_and_removals_survive_a_restart(repo, model_repo, tmp_path):
    work, outside = tmp_path / "work", tmp_path / "outside"
    shutil.copytree(model_repo / "ranker" / "1", outside / "my_ranker" / "1")
    with MakeUp(repo, work) as up:
        run("serving.config", "add", "my_ranker", "--base-path", str(outside / "my_ranker"), "--work-dir", str(work))
        run("serving.config", "remove", "text", "--work-dir", str(work))
        run("serving.rollout", "publish", "--model", "digits", "--from", str(repo / "digits" / "1"),
            "--work-dir", str(work))
        run("serving.rollout", "canary", "--model", "digits", "--version", "2", "--work-dir", str(work))
        run("serving.rollout", "promote", "--model", "digits", "--work-dir", str(work))
        assert (up.available("digits"), up.label("digits", "stable")) == ([2], 2)
    before = (work / "models.config").read_text()
    with MakeUp(repo, work) as up:
        assert (up.available("digits"), up.label("digits", "stable"), up.label("digits", "canary")) == ([2], 2, 2)
        assert (up.available("my_ranker"), up.label("my_ranker", "stable")) == ([1], 1)
        assert up.available("text") == []  # removed stays removed, though models/text is there
    assert (work / "models.config").read_text() == before
    entry = {e.name: e for e in load_model_server_config(work / "models.config").model_config_list.config}["digits"]
    assert list(entry.model_version_policy.specific.versions) == [2]

