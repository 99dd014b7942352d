"""A Docker engine for the tests: used where one answers, else installed and started, then stopped.

A new machine has Docker's client at most: ``make test`` installs Debian's
``docker.io`` (as root, with apt) and starts ``dockerd`` in the background,
logging to ``.cache/docker/dockerd.log``. What a run starts ends with it: the
engine it started is stopped when the run ends; an engine that already
answered is left as it was. Where no engine can be had (not root, no apt),
the run goes on without one and the Docker tests skip with the reason.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Optional

from serving.checkout import REPO_ROOT
from serving.processes import stop_process
from serving.stack.docker import probe_engine

__all__ = ["Engine", "start_engine"]

LOG_DIR = REPO_ROOT / ".cache" / "docker"
SBIN = "/usr/sbin:/sbin"


@dataclass
class Engine:
    """The engine of a run: ``started`` when this run started it (and so stops it)."""

    answers: bool
    reason: str
    proc: Optional[subprocess.Popen] = None

    @property
    def started(self) -> bool:
        return self.proc is not None

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the engine this run started (containers still running stop with it)."""
        if self.proc is not None:
            stop_process(self.proc, timeout)


def _dockerd() -> Optional[str]:
    return shutil.which("dockerd") or shutil.which("dockerd", path=SBIN)


def _install(log: Callable[[str], None]) -> Optional[str]:
    """Install Debian's docker.io; None when done, else why not."""
    if os.geteuid() != 0:
        return "no Docker engine answers and installing one needs root (apt-get install docker.io)"
    if shutil.which("apt-get") is None:
        return "no Docker engine answers and this machine has no apt-get to install docker.io"
    log("engine: installing Debian's docker.io (apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "docker.io"]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            detail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return f"installing docker.io failed ({' '.join(cmd)}: {detail})"
    return None


def start_engine(docker: str = "docker", wait: float = 90.0,
                 log: Callable[[str], None] = print) -> Engine:
    """An engine that answers: the one running, else Debian's ``dockerd`` started here."""
    if probe_engine(docker).answers:
        return Engine(True, "a Docker engine answers")
    if _dockerd() is None:
        why = _install(log)
        if why is not None:
            return Engine(False, why)
    dockerd = _dockerd()
    if dockerd is None:
        return Engine(False, "docker.io installed no dockerd")
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    logfile = LOG_DIR / "dockerd.log"
    log(f"engine: starting {dockerd} (log: {logfile}); it stops when this run ends")
    with open(logfile, "ab") as out:
        proc = subprocess.Popen([dockerd], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = logfile.read_text(errors="replace").strip().splitlines()[-3:]
            return Engine(False, f"dockerd exited ({proc.returncode}): {' | '.join(tail)}")
        if probe_engine(docker, timeout=5.0).answers:
            return Engine(True, "started dockerd", proc)
        time.sleep(0.5)
    engine = Engine(False, f"dockerd did not answer within {wait:.0f} s ({logfile})", proc)
    engine.stop()
    return engine
