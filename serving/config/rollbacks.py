"""Rollbacks that stick: a version rolled back is never served again as stable unless asked for by number.

``python -m serving.rollout rollback`` (and ``auto``'s rollback) record the
canary's version in ``<model dir>/rolled_back.json`` beside the version
directories, before the labels move. The marker lives with the model, not
with a stack: a new stack, a fresh work directory, ``make down && make up``
and every host that mounts the repository read it. TF Serving ignores the file
(a base path's children that are not numbers are not versions), so it cannot
by itself stop a ``latest`` policy: every writer of a served config pins a
``specific`` version list and picks the stable version with
:func:`stable_version`, the newest version that was not rolled back:

- ``serving.config add`` (without ``--version``), ``render`` from a model
  repository, and ``make up``'s reconcile of a model new to the served config
  (``serving.stack.prepared_configs``) call it; ``add`` refuses a ``latest`` or ``all``
  policy that would serve a rolled-back version;
- an operator asks for a rolled-back version by number (``serving.config add
  --version N``, ``--label stable=N``, ``rollout promote`` of a canary on it,
  ``rollout set-label --label stable --version N``): that serves it and clears
  its marker (:func:`reinstate`). ``rollout canary N`` serves it as canary and
  keeps the marker until it is promoted.

Versions are never moved or deleted: the exporter's next version number and
``--version N`` keep working on every version ever published.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Optional

from serving.config.config_lock import ConfigLock
from serving.model_repo import model_versions

__all__ = ["ROLLED_BACK_FILE", "rolled_back_versions", "record_rollback", "reinstate", "stable_version"]

ROLLED_BACK_FILE = "rolled_back.json"


def _marker(model_dir: Path) -> Path:
    return Path(model_dir) / ROLLED_BACK_FILE


def rolled_back_versions(model_dir: Path) -> dict[int, dict]:
    """``{version: {"at": ISO time, "by": what rolled it back}}`` for ``model_dir`` ({} without a marker).

    A marker that cannot be read is an error (OSError or ValueError naming the file): reading it as "no
    rollbacks" would serve a rolled-back version."""
    path = _marker(model_dir)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise ValueError(f"{path} is not the rollback marker's JSON ({exc}); fix or remove it") from None
    return {int(version): dict(info) for version, info in (doc.get("rolled_back") or {}).items()}


def _write(model_dir: Path, versions: dict[int, dict]) -> None:
    path = _marker(model_dir)
    if not versions:
        path.unlink(missing_ok=True)
        return
    doc = {"rolled_back": {str(v): versions[v] for v in sorted(versions)},
           "rule": "versions rolled back by python -m serving.rollout; no config writer serves them as stable "
                   "unless asked for by number"}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)


def record_rollback(model_dir: Path, version: int, *, by: str) -> None:
    """Mark ``version`` of ``model_dir`` rolled back (``by``: the command that did it)."""
    with ConfigLock(_marker(model_dir)).hold(60.0, who=by, log=lambda _: None):
        versions = rolled_back_versions(model_dir)
        versions[int(version)] = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "by": by}
        _write(model_dir, versions)


def reinstate(model_dir: Path, version: int) -> bool:
    """Clear ``version``'s marker (an operator asked for it by number); True if it had one."""
    if int(version) not in rolled_back_versions(model_dir):
        return False
    with ConfigLock(_marker(model_dir)).hold(60.0, who="reinstate", log=lambda _: None):
        versions = rolled_back_versions(model_dir)
        found = versions.pop(int(version), None) is not None
        _write(model_dir, versions)
    return found


def stable_version(model_dir: Path) -> Optional[int]:
    """The version a config writer serves as stable for ``model_dir``: its newest version that was not
    rolled back (None when it has none). Every writer that picks a version by itself calls this."""
    rolled_back = rolled_back_versions(model_dir)
    candidates = [v for v in model_versions(model_dir) if v not in rolled_back]
    return candidates[-1] if candidates else None
