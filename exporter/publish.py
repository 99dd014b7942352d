"""Atomic publication of a model version directory.

A version is written into a staging directory beside the versions, named so
that it is not a number (``.export-<host>-<pid>-<token>``): TF Serving's
file-system source and the embedded server only consider numeric directory
names, so they never see a partial version. The staging directory is renamed
to the numeric version as the very last step (one ``rename(2)`` on the same
file system). An interrupted export leaves only a staging directory, which the
next export (or :func:`remove_stale_staging`) deletes once its process is gone.
"""
from __future__ import annotations

import logging
import os
import secrets
import shutil
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import Optional

__all__ = [
    "STAGING_PREFIX",
    "Staging",
    "VersionExists",
    "existing_versions",
    "next_version",
    "remove_stale_staging",
]

log = logging.getLogger(__name__)

STAGING_PREFIX = ".export-"
# Staging dirs of another host (e.g. an exporter container sharing the volume)
# are only removed once they are this old, because their pid cannot be checked.
FOREIGN_STALE_SECONDS = 24 * 3600


class VersionExists(FileExistsError):
    """The requested version directory is already published."""


def existing_versions(base: Path) -> list[int]:
    """The numeric version directories under ``base``, ascending."""
    if not base.is_dir():
        return []
    return sorted(int(p.name) for p in base.iterdir() if p.is_dir() and p.name.isdigit())


def next_version(base: Path) -> int:
    """One more than the highest published version (1 for a new model)."""
    versions = existing_versions(base)
    return versions[-1] + 1 if versions else 1


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_stale(path: Path, host: str) -> bool:
    parts = path.name[len(STAGING_PREFIX):].rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    owner_host, pid = parts[0], int(parts[1])
    if owner_host == host:
        return pid != os.getpid() and not _pid_alive(pid)
    return time.time() - path.stat().st_mtime > FOREIGN_STALE_SECONDS


def remove_stale_staging(base: Path) -> list[Path]:
    """Delete staging dirs under ``base`` whose export process is gone; return them."""
    if not base.is_dir():
        return []
    host = _host()
    removed = []
    for path in base.iterdir():
        if path.is_dir() and path.name.startswith(STAGING_PREFIX) and _is_stale(path, host):
            log.info("removing stale staging directory %s", path)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _host() -> str:
    return socket.gethostname().replace("-", "_") or "host"


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    _fsync_dir(root)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Staging:
    """A staging directory for one export; a context manager.

    ``path`` is where the export writes. :meth:`publish` renames it to
    ``base/<version>`` and returns that path. Leaving the context without
    publishing (an exception) deletes the staging directory. With
    ``version=None`` the next free version is taken at publish time, so two
    concurrent exports of one model get different numbers.
    """

    def __init__(self, base: Path, version: Optional[int] = None) -> None:
        self.base = Path(base)
        self.version = version
        self.path = self.base / f"{STAGING_PREFIX}{_host()}-{os.getpid()}-{secrets.token_hex(4)}"
        self.published: Optional[Path] = None

    def check_version_free(self) -> None:
        """Raise :class:`VersionExists` if the requested version is already there."""
        if self.version is not None and (self.base / str(self.version)).exists():
            raise VersionExists(f"version {self.version} already exists at {self.base / str(self.version)}")

    def __enter__(self) -> "Staging":
        if self.version is not None and self.version < 0:
            raise ValueError(f"version must be a non-negative integer, got {self.version}")
        self.check_version_free()
        self.base.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(self.base)
        self.path.mkdir()
        return self

    def publish(self) -> Path:
        """Make the staged version visible (atomic rename); return its directory."""
        _fsync_tree(self.path)
        while True:
            version = self.version if self.version is not None else next_version(self.base)
            target = self.base / str(version)
            if target.exists():
                if self.version is not None:
                    raise VersionExists(f"version {version} already exists at {target}")
                continue
            try:
                os.rename(self.path, target)
            except OSError:
                if self.version is not None or not target.exists():
                    raise
                continue
            _fsync_dir(self.base)
            self.published = target
            return target

    def __exit__(self, exc_type: Optional[type], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if self.published is None:
            shutil.rmtree(self.path, ignore_errors=True)
