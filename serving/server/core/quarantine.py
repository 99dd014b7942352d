"""Crash markers: a version whose load or warmup kills the process is never loaded again by itself.

A model version runs its publisher's code when it loads and warms up (a
signature may call ``tf.raw_ops.Abort`` or a custom op that crashes), and a
crash takes the whole process, every other model with it. TF Serving then
crashes again on every restart while that version is the newest. Here:

- Before a version loads (session, restore, warmup) ``VersionQuarantine.loading``
  writes a marker ``loading-<key>.json`` into the quarantine directory (the
  version's name, number and path, and the pid and start time of the process);
  when the load returns or raises, the marker is removed. Loads take one lock,
  so at most one load marker of a live process exists: a crash names exactly one
  version (the cost: versions load one after another, not four at a time).
  A version's first request (a model without warmup records crashes there)
  runs under a marker too (``first_request``), without the lock: a crash while
  two versions answer their first request quarantines both.
- ``open()`` (at start, before any load) turns every marker whose process is
  gone into ``quarantined-<key>.json``: that version crashed the last process.
  A quarantined version is never loaded: the source aspires the versions the
  policy would pick without it (so the previous version keeps serving) and the
  quarantined one, whose load then fails at once, not retried, with
  FAILED_PRECONDITION naming the rule and the command that clears it
  (GetModelStatus reports it; a log line and the ``quarantined_versions``
  gauge say so).
- An operator clears it once the version is fixed or removed:
  ``python -m serving.server.quarantine --quarantine_dir DIR clear NAME VERSION``
  (``list`` shows them); a version published under a new number is a new version.

Markers are files, written to a temporary name and renamed, so a crash leaves
a whole marker or none. Only ``core/`` concepts are used: no TensorFlow.
Thread-safety: every method may be called from any thread.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, ContextManager, Iterator, Optional, Protocol, runtime_checkable

from serving import status
from serving.server.core.loader import Loader, LoaderFactory

__all__ = ["FirstRunGuarded", "QuarantinedVersion", "QuarantiningLoaderFactory", "VersionQuarantine", "VersionQuarantined",
           "clear_command", "process_start_ticks"]

log = logging.getLogger(__name__)

_LOADING, _QUARANTINED = "loading-", "quarantined-"


class VersionQuarantined(status.FailedPrecondition):
    """The load of a quarantined version; the manager's retrier does not retry it."""

    retryable = False


@dataclass(frozen=True)
class QuarantinedVersion:
    """One version that crashed a server process while it loaded."""

    name: str
    version: int
    path: str
    pid: int
    since: str   # when its load began, UTC, ISO 8601
    file: str


def process_start_ticks(pid: int) -> Optional[int]:
    """The start time of ``pid`` in clock ticks since boot (``/proc/PID/stat`` field 22); None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read().decode(errors="replace")
    except OSError:
        return None
    try:
        return int(text[text.rindex(")") + 2:].split()[19])
    except (ValueError, IndexError):
        return None


def clear_command(directory: str, name: str, version: int) -> str:
    """The operator's command that clears one quarantined version."""
    return f"python -m serving.server.quarantine --quarantine_dir {directory} clear {name} {version}"


def _key(name: str, version: int, path: str) -> str:
    return hashlib.sha256(f"{name}\0{version}\0{os.path.normpath(path)}".encode()).hexdigest()[:24]


class VersionQuarantine:
    """The quarantine directory of one server process. ``open()`` once, before the first load."""

    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)
        self._quarantined: dict[str, QuarantinedVersion] = {}
        self._load_lock = threading.Lock()   # one load at a time: a marker left behind names one version
        self._pid = os.getpid()
        self._start = process_start_ticks(self._pid)
        self._marker: Optional[str] = None   # the marker of the load running now

    def open(self) -> list[QuarantinedVersion]:
        """Create the directory; quarantine the markers of dead processes; return what is quarantined.

        Raises ``OSError`` when the directory cannot be created or read.
        """
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        for entry in sorted(os.listdir(self.directory)):
            if entry.startswith(_LOADING) and entry.endswith(".json"):
                self._adopt_marker(entry)
        found = {}
        for entry in sorted(os.listdir(self.directory)):
            if entry.startswith(_QUARANTINED) and entry.endswith(".json"):
                record = self._read(entry)
                if record is not None:
                    found[_key(record.name, record.version, record.path)] = record
        self._quarantined = found
        for record in found.values():
            log.error("Servable version {name: %s version: %d} at %s is QUARANTINED: a server process (pid %d) "
                      "died while loading, warming up or first running it (began %s). It will not be loaded; the other "
                      "versions serve. Clear it once fixed: %s", record.name, record.version, record.path,
                      record.pid, record.since, clear_command(self.directory, record.name, record.version))
        return list(found.values())

    def quarantined(self) -> list[QuarantinedVersion]:
        return list(self._quarantined.values())

    def is_quarantined(self, name: str, version: int, path: str) -> bool:
        return _key(name, version, path) in self._quarantined

    def refuse(self, name: str, version: int, path: str) -> None:
        """Raise ``VersionQuarantined`` if the version is quarantined."""
        record = self._quarantined.get(_key(name, version, path))
        if record is not None:
            raise VersionQuarantined(
                f"Version {version} of model {name} is quarantined: the server process died while loading, "
                f"warming up or first running it (at {record.since}), so it is not loaded again. Fix or remove {path}, then "
                f"clear it: {clear_command(self.directory, name, version)}")

    @contextlib.contextmanager
    def loading(self, name: str, version: int, path: str) -> Iterator[None]:
        """Hold the load lock and a crash marker for the version while the body runs."""
        marker = os.path.join(self.directory, f"{_LOADING}{_key(name, version, path)}.json")
        with self._load_lock:
            self._write(marker, {"name": name, "version": version, "path": path, "pid": self._pid,
                                 "pid_start": self._start,
                                 "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            self._marker = marker
            try:
                yield
            finally:
                self._marker = None
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(marker)

    @contextlib.contextmanager
    def first_request(self, name: str, version: int, path: str) -> Iterator[None]:
        """A crash marker for the version's first request (no lock: requests of other versions run on)."""
        marker = os.path.join(self.directory, f"{_LOADING}{_key(name, version, path)}.json")
        self._write(marker, {"name": name, "version": version, "path": path, "pid": self._pid,
                             "pid_start": self._start, "phase": "first request",
                             "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        try:
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(marker)

    def abandon(self) -> None:
        """Remove the marker of the load running now: the process is being stopped, not crashing.

        Safe to call from a signal handler (one unlink, no lock)."""
        marker = self._marker
        if marker is not None:
            with contextlib.suppress(OSError):
                os.unlink(marker)

    def clear(self, name: str, version: int) -> list[str]:
        """Remove the quarantine of ``name`` version ``version`` (any path); the files removed."""
        removed = []
        for entry in sorted(os.listdir(self.directory)):
            if not entry.startswith(_QUARANTINED):
                continue
            record = self._read(entry)
            if record is not None and record.name == name and record.version == version:
                os.unlink(os.path.join(self.directory, entry))
                removed.append(entry)
        return removed

    def _adopt_marker(self, entry: str) -> None:
        path = os.path.join(self.directory, entry)
        try:
            with open(path) as marker:
                fields = json.load(marker)
            pid, start = int(fields["pid"]), fields.get("pid_start")
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("Ignoring unreadable crash marker %s", path)
            return
        if pid != self._pid and start is not None and process_start_ticks(pid) == start:
            return   # another live server process is loading it now
        if pid == self._pid and start == self._start:
            return
        os.replace(path, os.path.join(self.directory, _QUARANTINED + entry[len(_LOADING):]))

    def _read(self, entry: str) -> Optional[QuarantinedVersion]:
        path = os.path.join(self.directory, entry)
        try:
            with open(path) as record:
                fields = json.load(record)
            return QuarantinedVersion(str(fields["name"]), int(fields["version"]), str(fields["path"]),
                                      int(fields["pid"]), str(fields.get("since", "")), path)
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("Ignoring unreadable quarantine record %s", path)
            return None

    def _write(self, path: str, fields: dict) -> None:
        temporary = f"{path}.{self._pid}.tmp"
        with open(temporary, "w") as marker:
            json.dump(fields, marker)
            marker.flush()
            os.fsync(marker.fileno())
        os.replace(temporary, path)


@runtime_checkable
class FirstRunGuarded(Protocol):
    """A servable that can run its first request inside a context (``tensorflow.servable.Servable``)."""

    def guard_first_run(self, guard: Callable[[], ContextManager[None]]) -> None: ...


class QuarantiningLoaderFactory:
    """Wraps a ``LoaderFactory``: each load refuses a quarantined version, else runs under a crash marker."""

    def __init__(self, inner: LoaderFactory, quarantine: VersionQuarantine) -> None:
        self._inner = inner
        self._quarantine = quarantine

    def __call__(self, name: str, version: int, path: str) -> Loader:
        return _MarkedLoader(self._inner(name, version, path), self._quarantine, name, version, path)


class _MarkedLoader:
    def __init__(self, inner: Loader, quarantine: VersionQuarantine, name: str, version: int, path: str) -> None:
        self._inner, self._quarantine = inner, quarantine
        self._name, self._version, self._path = name, version, path

    def estimate_resources(self) -> int:
        return self._inner.estimate_resources()

    def load(self) -> None:
        self._quarantine.refuse(self._name, self._version, self._path)
        with self._quarantine.loading(self._name, self._version, self._path):
            self._inner.load()
        servable = self._inner.servable()
        if isinstance(servable, FirstRunGuarded):   # its first request runs under a marker too
            servable.guard_first_run(
                lambda: self._quarantine.first_request(self._name, self._version, self._path))

    def unload(self) -> None:
        self._inner.unload()

    def servable(self) -> object:
        return self._inner.servable()
