"""Publishing a new version into the model repository (atomically).

A SavedModel directory is copied with the repository's staging-then-rename
publish (``serving.model_repo.Staging``). A zoo model is exported by the
exporter's own CLI in a subprocess (``python -m exporter export``): the
rollout sits below the exporter and never imports it (nor TensorFlow).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

from serving.checkout import REPO_ROOT
from serving.model_repo import Staging
from serving.rollout.plan import RolloutError

__all__ = ["publish_saved_model", "export_version", "export_command"]


def publish_saved_model(source: Path, models_dir: Path, name: str,
                        version: Optional[int] = None) -> Path:
    """Copy the SavedModel directory ``source`` to ``models_dir/name/<version>``.

    Uses the repository's staging-then-rename publish, so a polling server
    never sees a half-copied version. ``version=None`` takes the next free
    number. Returns the published version directory.
    """
    source = Path(source)
    if not (source / "saved_model.pb").is_file():
        raise FileNotFoundError(f"{source} is not a SavedModel directory (no saved_model.pb)")
    with Staging(Path(models_dir) / name, version) as staging:
        shutil.copytree(source, staging.path, dirs_exist_ok=True)
        return staging.publish()


def export_command(model: str, models_dir: Path, *, variant: str = "fp32",
                   version: Optional[int] = None) -> list[str]:
    """The exporter's command line that exports ``model`` into ``models_dir`` (quietly)."""
    command = [sys.executable, "-m", "exporter", "export", "--model", model, "--variant", variant,
               "--model-repo", str(Path(models_dir).resolve()), "--quiet"]
    return command + (["--version", str(version)] if version is not None else [])


def export_version(model: str, models_dir: Path, *, variant: str = "fp32",
                   version: Optional[int] = None) -> Path:
    """Export a fresh version of zoo ``model`` with the exporter (needs TensorFlow).

    Runs :func:`export_command` from the repository root and returns the
    published version directory the exporter prints. RolloutError, with the
    exporter's last line of error output, when the export fails.
    """
    proc = subprocess.run(export_command(model, models_dir, variant=variant, version=version),
                          cwd=REPO_ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise RolloutError(f"exporting {model} ({variant}) failed (exit {proc.returncode}): "
                           f"{lines[-1] if lines else 'no error output'}")
    return Path(proc.stdout.strip().splitlines()[-1])
