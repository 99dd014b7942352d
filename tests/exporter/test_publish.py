"""Publication is atomic: no partial or interrupted export ever looks like a version."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from serving import model_repo
from serving.checkout import REPO_ROOT
from tests.support.exporter import cli_env


def _numeric(base):
    return sorted(p.name for p in base.iterdir() if p.name.isdigit()) if base.is_dir() else []


@pytest.mark.slow   # runs a real export in a subprocess
def test_export_killed_midway_leaves_no_numeric_version_and_is_cleaned_up_later(tmp_path):
    out = tmp_path / "models"
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "export", "--model", "text",
                             "--model-repo", str(out), "--quiet"], cwd=REPO_ROOT, env=cli_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base, staging = out / "text", None
    try:
        deadline = time.monotonic() + 300
        while staging is None and time.monotonic() < deadline and proc.poll() is None:
            found = list(base.glob(f"{model_repo.STAGING_PREFIX}*")) if base.is_dir() else []
            staging = found[0] if found else None
            time.sleep(0.02)
        assert staging is not None, "the export never started writing its staging directory"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(60) == -signal.SIGKILL  # killed, not finished
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _numeric(base) == []
    assert staging.exists() and not staging.name[0].isdigit()
    assert model_repo.remove_stale_staging(base) == [staging]
    assert list(base.iterdir()) == []


def _stage(base, version=None, content="x"):
    with model_repo.Staging(base, version) as staging:
        (staging.path / "saved_model.pb").write_text(content)
        return staging.publish()


def test_omitted_version_takes_the_next_integer(tmp_path):
    base = tmp_path / "m"
    assert _stage(base).name == "1"
    assert _stage(base).name == "2"
    (base / "7").mkdir()
    assert _stage(base).name == "8"
    assert _numeric(base) == ["1", "2", "7", "8"]
    assert [p for p in base.iterdir() if not p.name.isdigit()] == []


def test_an_existing_explicit_version_is_refused_and_left_untouched(tmp_path):
    base = tmp_path / "m"
    _stage(base, 3, "first")
    with pytest.raises(model_repo.VersionExists, match="version 3 already exists"):
        _stage(base, 3, "second")
    assert (base / "3" / "saved_model.pb").read_text() == "first"
    assert _numeric(base) == ["3"]


def test_a_failed_export_removes_its_staging_directory(tmp_path):
    base = tmp_path / "m"
    with pytest.raises(RuntimeError):
        with model_repo.Staging(base) as staging:
            (staging.path / "partial").write_text("x")
            raise RuntimeError("boom")
    assert list(base.iterdir()) == []


def test_stale_cleanup_spares_staging_of_live_processes(tmp_path):
    base = tmp_path / "m"
    base.mkdir()
    live = base / f"{model_repo.STAGING_PREFIX}{model_repo._host()}-{os.getppid()}-abcd"
    dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout.strip()
    dead = base / f"{model_repo.STAGING_PREFIX}{model_repo._host()}-{dead_pid}-abcd"
    live.mkdir()
    dead.mkdir()
    assert model_repo.remove_stale_staging(base) == [dead]
    assert live.exists()
