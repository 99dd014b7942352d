"""File-system source: polls each model's ``base_path`` for numeric version directories.

Mirrors ``sources/storage_path/file_system_storage_path_source.cc``. Each
poll lists ``base_path``; children whose name parses as an int64 are
versions (``serving.model_repo.parse_version``, TF Serving's rule), everything
else (the exporter's temp dirs, ``.DS_Store``, ...) is ignored. A name of
digits beyond int64 (``99999999999999999999``) is ignored too, with a warning
logged once per path (TF Serving skips it silently). The model's ``ServableVersionPolicy`` picks the aspired versions:
``latest {num_versions}`` (default, 1), ``all {}`` or ``specific {versions}``.
The full aspired list is handed to the callback on every poll; the manager
diffs it against what it holds. A model removed from the config gets one
empty list (all its versions are un-aspired).

Polling: ``poll_wait_seconds`` > 0 polls periodically on a background thread;
0 or negative means no periodic polling. Unlike TF Serving (which polls once
at startup for 0 and never for negative), every ``set_servables`` call polls
the new config once, so a reloaded config takes effect whatever the setting.
A missing ``base_path`` is logged and that model is skipped for the poll.

A version ``quarantined`` (a predicate of name, version and path; see
``core.quarantine``) is never chosen by the policy: the policy picks from the
other versions on disk, so the previous version keeps serving, and the
quarantined versions it would have picked are aspired beside them, so that
their refused load is reported in the model's status.
"""
from __future__ import annotations

import logging
import os
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from serving.model_repo import parse_version

if TYPE_CHECKING:  # annotations only
    from tensorflow_serving.config.file_system_storage_path_source_pb2 import FileSystemStoragePathSourceConfig

__all__ = ["ServableToMonitor", "AspiredVersion", "FileSystemSource", "IsQuarantined", "aspired_versions",
           "list_versions"]

log = logging.getLogger(__name__)

_NUMERIC = re.compile(r"\s*[+-]?[0-9]+\s*", re.ASCII)
_MAX_WARNED_PATHS = 4096  # what the once-per-path warning remembers


@dataclass(frozen=True)
class AspiredVersion:
    version: int
    path: str


@dataclass(frozen=True)
class ServableToMonitor:
    """One model to poll: name, base path and its ``ServableVersionPolicy`` proto (or None)."""

    name: str
    base_path: str
    version_policy: Optional[FileSystemStoragePathSourceConfig.ServableVersionPolicy] = None


AspiredVersionsCallback = Callable[[str, list[AspiredVersion]], None]
IsQuarantined = Callable[[str, int, str], bool]
"""``(name, version, path) -> bool``: whether the version is quarantined (never to be loaded)."""


def list_versions(base_path: str, warned: Optional[set[str]] = None) -> dict[int, str]:
    """Version number -> child directory name, for children that parse as int64 version numbers.

    A directory of digits beyond int64 is skipped with a warning, once per path
    when ``warned`` (the paths already warned about) is given.
    """
    versions: dict[int, str] = {}
    for child in sorted(os.listdir(base_path)):
        number = parse_version(child)
        path = os.path.join(base_path, child)
        if number is None:
            if _NUMERIC.fullmatch(child) and os.path.isdir(path):
                _warn_out_of_range(path, warned)
            continue
        if not os.path.isdir(path):
            continue
        if number in versions:
            log.warning("Duplicate version directories detected. Version %d will be loaded from "
                        "%s, %s will be ignored.", number, child, versions[number])
        versions[number] = child
    return versions


def _warn_out_of_range(path: str, warned: Optional[set[str]]) -> None:
    if warned is not None:
        if path in warned:
            return
        if len(warned) >= _MAX_WARNED_PATHS:
            warned.clear()
        warned.add(path)
    log.warning("Ignoring version directory %s: its name is beyond the int64 range of version "
                "numbers, as TF Serving ignores a name that does not parse as an int64", path[:1024])


def aspired_versions(servable: ServableToMonitor, on_disk: dict[int, str]) -> list[AspiredVersion]:
    """Apply the version policy to the versions found on disk (highest first)."""
    policy = servable.version_policy
    choice = policy.WhichOneof("policy_choice") if policy is not None else None
    if choice == "all":
        chosen = sorted(on_disk, reverse=True)
    elif choice == "specific" and policy is not None:
        wanted = set(policy.specific.versions)
        if not wanted:
            log.warning("No specific versions requested for servable %s.", servable.name)
        for missing in sorted(wanted - set(on_disk)):
            log.warning("Version %d of servable %s, which was requested to be served as a "
                        "'specific' version in the servable's version policy, was not found in "
                        "the file system", missing, servable.name)
        chosen = sorted(wanted & set(on_disk), reverse=True)
    else:
        count = max(policy.latest.num_versions if policy is not None and choice == "latest" else 1, 1)
        chosen = sorted(on_disk, reverse=True)[:count]
    return [AspiredVersion(v, os.path.join(servable.base_path, on_disk[v])) for v in chosen]


class FileSystemSource:
    """Polls the configured models and reports their aspired versions.

    ``start()`` begins periodic polling; ``stop()`` ends it and joins the
    thread. ``set_servables`` may be called from any thread; callbacks run on
    the caller's thread (for ``set_servables``) or the polling thread.
    """

    def __init__(self, callback: AspiredVersionsCallback, poll_wait_seconds: float = 1.0,
                 quarantined: Optional[IsQuarantined] = None) -> None:
        self._callback = callback
        self._quarantined = quarantined
        self._poll_wait_seconds = poll_wait_seconds
        self._servables: tuple[ServableToMonitor, ...] = ()
        self._lock = threading.Lock()
        self._warned: set[str] = set()   # out-of-range version paths already logged
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        if self._poll_wait_seconds > 0 and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._poll_loop,
                                            name="FileSystemSource-poll", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def set_servables(self, servables: Sequence[ServableToMonitor]) -> None:
        """Replace the models to poll; un-aspire removed ones; poll the new set once."""
        with self._lock:
            removed = {s.name for s in self._servables} - {s.name for s in servables}
            self._servables = tuple(servables)
            for name in sorted(removed):
                self._callback(name, [])
            self._poll_locked()

    def poll(self) -> None:
        """Poll every configured model now."""
        with self._lock:
            self._poll_locked()

    def _poll_locked(self) -> None:
        for servable in self._servables:
            try:
                on_disk = list_versions(servable.base_path, self._warned)
            except OSError as exc:
                log.error("FileSystemStoragePathSource encountered a filesystem access error: "
                          "Could not find base path %s for servable %s with error %s",
                          servable.base_path, servable.name, exc)
                continue
            versions = self._aspired(servable, on_disk)
            if not versions:
                log.warning("No versions of servable %s found under base path %s. Did you forget "
                            "to name your leaf directory as a number (eg. '/1/')?",
                            servable.name, servable.base_path)
            self._callback(servable.name, versions)

    def _aspired(self, servable: ServableToMonitor, on_disk: dict[int, str]) -> list[AspiredVersion]:
        versions = aspired_versions(servable, on_disk)
        if self._quarantined is None:
            return versions
        refused = [v for v in versions if self._quarantined(servable.name, v.version, v.path)]
        if not refused:
            return versions
        healthy = {number: child for number, child in on_disk.items()
                   if not self._quarantined(servable.name, number, os.path.join(servable.base_path, child))}
        return sorted(refused + aspired_versions(servable, healthy), key=lambda v: v.version, reverse=True)

    def _poll_loop(self) -> None:
        while not self._stop.wait(self._poll_wait_seconds):
            try:
                self.poll()
            except Exception:
                log.exception("file-system poll failed")
