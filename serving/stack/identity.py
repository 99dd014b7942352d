"""Which process a pid is: its pid and its start time, read from ``/proc``; and children that die with us.

A pid alone names a process only while it lives: once it exits, the kernel
hands the number to the next process, possibly another checkout's ``make
up``. ``make up`` records each process it starts as a :class:`ProcessIdentity`
(pid and start time in clock ticks since boot, field 22 of
``/proc/PID/stat``), and ``make down`` signals a pid only while both still
match. A child started with :func:`die_with_parent` as its ``preexec_fn`` gets
SIGTERM when the process that started it dies, even by SIGKILL
(``prctl(PR_SET_PDEATHSIG)``), so a killed ``make up`` leaves no server behind.
"""
from __future__ import annotations

import ctypes
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

__all__ = ["ProcessIdentity", "start_time", "die_with_parent"]

PR_SET_PDEATHSIG = 1


def start_time(pid: int) -> Optional[int]:
    """When ``pid`` started (clock ticks since boot), or None when no such process runs (or it is a zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # After the command in parentheses: field 3 (state) is fields[0], field 22 (starttime) is fields[19].
    return None if fields[0] in ("Z", "X") else int(fields[19])


@dataclass(frozen=True)
class ProcessIdentity:
    """A process as ``make up`` recorded it: its pid and the start time that pid had then."""

    pid: int
    start: int

    @classmethod
    def of(cls, pid: int) -> Optional["ProcessIdentity"]:
        """The identity of the running process ``pid`` (None when it does not run)."""
        started = start_time(pid)
        return None if started is None else cls(pid, started)

    def alive(self) -> bool:
        """Whether this very process still runs: its pid exists and started when it was recorded."""
        return start_time(self.pid) == self.start

    def terminate(self) -> bool:
        """SIGTERM this process if it is still the one recorded; whether the signal was sent."""
        if not self.alive():
            return False
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return False
        return True


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` for ``Popen``: the child asks the kernel for ``sig`` when this process (the one
    calling ``die_with_parent``, its parent) dies. A parent that died before the call has made the
    child an orphan already: then the child raises the signal at once."""
    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the forked child takes no loader lock

    def arm() -> None:
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return arm
