"""``python -m serving.rollout`` defaults to the config the stack serves, and refuses, before contacting any
server, a config naming base paths or versions this host does not have (TF Serving would wait for them)."""
from __future__ import annotations

import subprocess
from pathlib import Path

from serving.checkout import REPO_ROOT
from serving.config.models import render_repository_config, write_model_server_config
from serving.config.served_config import STATE_FILE, StackState, write_state
from tests.support.config import Listener, run_cli, user_model


def rollout(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args, module="serving.rollout")


def embedded_stack(tmp_path: Path, grpc: str) -> tuple[Path, Path]:
    repo = tmp_path / "models"
    user_model(repo, "digits", versions=(1, 2))
    user_model(repo, "text")
    work = tmp_path / "work"
    work.mkdir()
    config = render_repository_config(repo)
    for entry in config.model_config_list.config:  # what make up serves: version 1, both labels on it
        entry.model_version_policy.specific.versions[:] = [1]
        entry.version_labels.update({"stable": 1, "canary": 1})
    write_model_server_config(config, work / "models.config")
    write_state(StackState("embedded", work / "models.config", grpc, "http://127.0.0.1:1", repo), work / STATE_FILE)
    return repo, work


def test_the_plan_is_made_on_the_stacks_config_by_default(tmp_path):
    repo, work = embedded_stack(tmp_path, "127.0.0.1:1")
    proc = rollout("canary", "--model", "digits", "--version", "2", "--dry-run", "--work-dir", str(work))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["would load digits versions [1, 2] (labels unchanged)",
                                        "would move digits labels: canary -> 2, stable -> 1"]


def test_the_compose_file_pushed_to_the_embedded_stack_is_refused_without_contacting_it(tmp_path):
    listener = Listener()
    repo, work = embedded_stack(tmp_path, listener.target)
    proc = rollout("canary", "--model", "digits", "--version", "2", "--config-file",
                   str(REPO_ROOT / "serving" / "models.cpu.config"), "--work-dir", str(work))
    assert proc.returncode == 1
    assert f"rollout failed: nothing was sent to {listener.target}" in proc.stderr
    assert "digits: no version directory under /models/digits" in proc.stderr
    assert "leave --config-file out to use the stack's config" in proc.stderr
    assert listener.close() == 0


def test_a_model_whose_directory_is_gone_is_named_and_nothing_is_sent(tmp_path):
    listener = Listener()
    repo, work = embedded_stack(tmp_path, listener.target)
    before = (work / "models.config").read_text()
    for path in sorted((repo / "text").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    proc = rollout("canary", "--model", "digits", "--version", "2", "--work-dir", str(work))
    assert proc.returncode == 1
    assert f"text: no version directory under {repo / 'text'}" in proc.stderr
    assert (work / "models.config").read_text() == before
    assert listener.close() == 0


def test_publish_writes_into_the_stacks_model_repository_by_default(tmp_path):
    repo, work = embedded_stack(tmp_path, "127.0.0.1:1")
    source = user_model(tmp_path / "exported", "digits") / "1"
    proc = rollout("publish", "--model", "digits", "--from", str(source), "--work-dir", str(work))
    assert proc.returncode == 0, proc.stderr
    assert (repo / "digits" / "3" / "saved_model.pb").is_file()
