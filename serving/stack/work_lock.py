"""One ``make up`` per work directory at a time: an exclusive lock on ``<work dir>/make-up.lock``.

``make up`` holds it while it starts the stack (compose) or for as long as it
runs (embedded, in the foreground). A second ``make up`` on the same work
directory does not wait: it is refused, naming the holder's pid, which the
lock file records. The kernel drops the lock when its holder dies, however it
dies, so a killed ``make up`` never leaves a stale lock. The file descriptor is
not inherited by children (the server, the exports): the lock is the
``make up`` process's own.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Optional

__all__ = ["LOCK_FILE", "WorkDirBusy", "WorkDirLock"]

LOCK_FILE = "make-up.lock"


class WorkDirBusy(RuntimeError):
    """Another process holds the work directory's lock."""

    def __init__(self, path: Path, holder: Optional[int]) -> None:
        self.path, self.holder = path, holder
        who = f"pid {holder}" if holder else "another process"
        super().__init__(f"another make up ({who}) holds {path}")


class WorkDirLock:
    """The exclusive lock of a work directory; a context manager. ``acquire`` raises :class:`WorkDirBusy`."""

    def __init__(self, work_dir: Path) -> None:
        self.path = Path(work_dir) / LOCK_FILE
        self._fd: Optional[int] = None

    def acquire(self) -> "WorkDirLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            raise WorkDirBusy(self.path, int(holder) if holder.isdigit() else None) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "WorkDirLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
