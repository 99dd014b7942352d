"""``python -m serving.rollout publish``: a SavedModel copy or an exporter subprocess, never a half version."""
from __future__ import annotations

import subprocess
import sys

import pytest

from serving.checkout import REPO_ROOT
from serving.model_repo import model_versions
from serving.rollout.plan import RolloutError
from serving.rollout.publish import export_command, export_version, publish_saved_model


def test_a_copied_saved_model_takes_the_next_version(model_repo, tmp_path):
    repo = tmp_path / "models"
    assert publish_saved_model(model_repo / "digits" / "1", repo, "digits", 3) == repo / "digits" / "3"
    assert publish_saved_model(model_repo / "digits" / "1", repo, "digits") == repo / "digits" / "4"
    assert model_versions(repo / "digits") == [3, 4]
    assert sorted(p.name for p in (repo / "digits").iterdir()) == ["3", "4"]  # no staging left


def test_a_directory_without_saved_model_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a SavedModel directory"):
        publish_saved_model(tmp_path, tmp_path / "models", "digits")
    assert not (tmp_path / "models").exists()


def test_a_zoo_model_is_exported_by_the_exporter_cli(tmp_path):
    command = export_command("text", tmp_path / "models", variant="xla", version=2)
    assert command[:4] == [sys.executable, "-m", "exporter", "export"]
    assert command[4:] == ["--model", "text", "--variant", "xla", "--model-repo", str((tmp_path / "models").resolve()),
                           "--quiet", "--version", "2"]


def test_an_export_that_fails_raises_rollout_error_with_the_exporters_message(tmp_path):
    with pytest.raises(RolloutError, match=r"exporting mnist \(fp32\) failed \(exit 2\): .*invalid choice: 'mnist'"):
        export_version("mnist", tmp_path / "models")
    assert not (tmp_path / "models").exists()


def test_the_rollout_cli_reports_a_failed_export_and_exits_1(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "serving.rollout", "publish", "--model", "mnist",
                           "--model-repo", str(tmp_path / "models")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "rollout failed: exporting mnist (fp32) failed (exit 2)" in proc.stderr
