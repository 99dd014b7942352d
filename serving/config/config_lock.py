"""One lock and a compare-and-swap for a models config file that several commands change.

Every command that changes a served config (``serving.config add|remove``,
the rollout's label moves, ``auto``'s) holds :class:`ConfigLock` for the whole
change: ``fcntl.flock`` on ``.<file>.lock`` beside the config. Only one change
runs at a time, from its write to its last push; a second command waits for
the lock (up to its timeout) instead of interleaving pushes. The kernel drops
the lock of a process that dies, so a killed command never leaves it held.

The compare-and-swap: a command records the file's :class:`Snapshot` (its
text and a SHA-256 of it) when it reads it, and under the lock writes only
if the file is still that snapshot (:meth:`ConfigLock.write_if`); otherwise
:class:`StaleConfig`, and the caller plans again from the fresh file or
refuses (``serving.config.served_config.change_served_config``). A writer that does
not take the lock (an editor) is caught by the same check.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

__all__ = ["StaleConfig", "LockTimeout", "Snapshot", "ConfigLock", "read_snapshot"]


class StaleConfig(RuntimeError):
    """The config file changed since the command read it; nothing of this command's was written."""


class LockTimeout(RuntimeError):
    """Another command held the config's lock for longer than this one would wait."""


@dataclass(frozen=True)
class Snapshot:
    """A config file's text as read (``""`` when absent) and its version (a SHA-256 of the bytes)."""

    text: str
    version: str

    @property
    def exists(self) -> bool:
        return self.version != ABSENT


ABSENT = "absent"


def read_snapshot(path: Path) -> Snapshot:
    """The :class:`Snapshot` of ``path`` now."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return Snapshot("", ABSENT)
    return Snapshot(data.decode(), hashlib.sha256(data).hexdigest())


class ConfigLock:
    """The lock file beside ``config_path``; :meth:`hold` takes it, :meth:`write_if` swaps under it."""

    def __init__(self, config_path: Path) -> None:
        self.config_path = Path(config_path)
        self.path = self.config_path.with_name(f".{self.config_path.name}.lock")

    @contextmanager
    def hold(self, timeout: float = 600.0, *, who: str = "",
             log: Callable[[str], None] = print) -> Iterator["ConfigLock"]:
        """Hold the lock (exclusive) for the block; LockTimeout after ``timeout`` seconds of waiting.

        ``who`` (a command line) is written into the lock file, so that a command waiting for it can
        say what it waits for.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._acquire(fd, timeout, log)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {who}\n".encode(), 0)
            try:
                yield self
            finally:
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _acquire(self, fd: int, timeout: float, log: Callable[[str], None]) -> None:
        deadline, told = time.monotonic() + timeout, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            holder = self.holder()
            if not told:
                log(f"waiting for another change of {self.config_path} to finish"
                    + (f" (pid {holder})" if holder else "") + f"; giving up after {timeout:g} s")
                told = True
            if time.monotonic() > deadline:
                raise LockTimeout(f"another command (pid {holder or 'unknown'}) has been changing "
                                  f"{self.config_path} for over {timeout:g} s; nothing was sent (its lock: "
                                  f"{self.path})")
            time.sleep(0.05)

    def holder(self) -> str:
        """What the lock file says holds it (``pid command``), or ``""``."""
        try:
            return self.path.read_text().strip()
        except OSError:
            return ""

    def write_if(self, expected: Snapshot, write: Callable[[], None]) -> Snapshot:
        """Run ``write`` if the file is still ``expected``; its new snapshot. StaleConfig otherwise.

        Call it while holding the lock: then nothing that takes the lock can change the file between
        the check and the write.
        """
        current = read_snapshot(self.config_path)
        if current.version != expected.version:
            raise StaleConfig(f"{self.config_path} changed since it was read (by another command or an "
                              "editor)")
        write()
        return read_snapshot(self.config_path)

