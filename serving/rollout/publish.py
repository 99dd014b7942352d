"""Publishing a new version into the model repository (atomically)."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Optional

from serving.model_repo import Staging

__all__ = ["publish_saved_model", "export_version"]


def publish_saved_model(source: Path, models_dir: Path, name: str,
                        version: Optional[int] = None) -> Path:
    """Copy the SavedModel directory ``source`` to ``models_dir/name/<version>``.

    Uses the repository's staging-then-rename publish, so a polling server
    never sees a half-copied version. ``version=None`` takes the next free number.
    Returns the published version directory.
    """
    source = Path(source)
    if not (source / "saved_model.pb").is_file():
        raise FileNotFoundError(f"{source} is not a SavedModel directory (no saved_model.pb)")
    with Staging(Path(models_dir) / name, version) as staging:
        shutil.copytree(source, staging.path, dirs_exist_ok=True)
        return staging.publish()


def export_version(model: str, models_dir: Path, *, variant: str = "fp32",
                   version: Optional[int] = None) -> Path:
    """Export a fresh version of zoo ``model`` with the exporter (needs TensorFlow)."""
    from exporter.export import export_model

    return export_model(model, variant=variant, version=version, out=models_dir, progress=False)
