"""A program under test in a process of its own: started with its output in a log file, waited for until
it answers, stopped. The one start/wait/stop of the fixtures (Prometheus, the nginx gateway, make up, a
bare server command); the embedded server has its own in ``serving.launcher.ServerProcess``.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import httpx

from serving.checkout import REPO_ROOT
from serving.processes import Group, stop_process

__all__ = ["LoggedProcess", "MakeUpEmbedded", "http_ready"]


class LoggedProcess:
    """``command`` run with its output in ``log`` (its stderr in ``stderr_log`` if given).

    ``start(ready, what, timeout)`` launches it and polls ``ready()`` until it holds; if the process
    exits first or ``timeout`` passes, it is stopped and an AssertionError names ``what`` with the log's
    tail. ``stop()`` stops it (``serving.processes.stop_process`` with ``group``) and gives its exit status.
    """

    def __init__(self, command: Sequence[str], log: Path, *, stderr_log: Optional[Path] = None,
                 group: Group = "none", **popen: Any) -> None:
        self.command, self.log, self.stderr_log, self.group = list(command), Path(log), stderr_log, group
        self.popen = popen
        self.proc: Optional[subprocess.Popen] = None

    def launch(self) -> subprocess.Popen:
        with contextlib.ExitStack() as files:
            out = files.enter_context(open(self.log, "wb"))
            err = files.enter_context(open(self.stderr_log, "wb")) if self.stderr_log else subprocess.STDOUT
            self.proc = subprocess.Popen(self.command, stdout=out, stderr=err, **self.popen)
        return self.proc

    def start(self, ready: Callable[[], bool], what: str, timeout: float, every: float = 0.2) -> "LoggedProcess":
        proc = self.launch()
        deadline = time.monotonic() + timeout
        try:
            while not ready():
                assert proc.poll() is None, f"{what} exited with {proc.returncode}:\n{self.tail()}"
                assert time.monotonic() < deadline, f"{what} not ready within {timeout:.0f} s:\n{self.tail()}"
                threading.Event().wait(every)
        except BaseException:
            self.stop()
            raise
        return self

    def text(self) -> str:
        """The log so far (the stderr log's, when stderr has one)."""
        return Path(self.stderr_log or self.log).read_text(errors="replace")

    def tail(self, chars: int = 4000) -> str:
        return self.text()[-chars:]

    def stop(self, timeout: float = 60.0, sig: int = signal.SIGTERM) -> Optional[int]:
        """Stop the process (None if it never started); its exit status."""
        return None if self.proc is None else stop_process(self.proc, timeout, sig=sig, group=self.group)


def http_ready(url: str) -> Callable[[], bool]:
    """A ``ready`` for :meth:`LoggedProcess.start`: ``url`` answers 200 (Prometheus's ``/-/ready``)."""
    def ready() -> bool:
        try:
            return httpx.get(url, timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False
    return ready


class MakeUpEmbedded(LoggedProcess):
    """``python -m serving.stack --backend embedded`` on ``repo`` with its own work dir and addresses (not
    started); in a process group of its own, killed whole if it does not stop."""

    def __init__(self, repo: Path, work: Path, grpc: str, rest: str, log: Path, timeout: int, *extra: str) -> None:
        super().__init__(
            [sys.executable, "-m", "serving.stack", "--backend", "embedded", "--model-repo", str(repo),
             "--work-dir", str(work), "--grpc", grpc, "--rest", rest, "--timeout", str(timeout), *extra],
            log, group="kill", cwd=REPO_ROOT, start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2"})
        self.repo, self.work, self.grpc, self.rest = repo, work, grpc, rest
