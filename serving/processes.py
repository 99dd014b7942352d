"""Stopping a child process: a signal, a bounded wait, then SIGKILL. The one copy of that sequence.

Imports nothing of the project, so every layer may use it (the embedded server's launcher, the load
test runner, the image tools, the benchmarks' peers, the test fixtures).
"""
from __future__ import annotations

import os
import signal
import subprocess
from typing import Literal

__all__ = ["Group", "stop_process"]

Group = Literal["none", "kill", "all"]
"""Where the signals go: ``"none"``, to the process alone; ``"kill"``, the first signal to the process and
the SIGKILL to its process group; ``"all"``, both to its process group. A group needs the process to lead
one (``start_new_session=True``)."""


def stop_process(proc: subprocess.Popen, timeout: float, *, sig: int = signal.SIGTERM,
                 group: Group = "none") -> int:
    """Send ``sig`` (SIGTERM: exit cleanly), wait up to ``timeout`` seconds, then SIGKILL and wait; the
    exit status. A process that has exited already gets no signal."""
    if proc.poll() is not None:
        return proc.returncode
    if group == "all":
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        if group == "none":
            proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()
