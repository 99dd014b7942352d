"""Run the embedded server (``python -m serving.server``) as a real subprocess.

It takes ``tensorflow_model_server``'s own flags, so a test states exactly the
command line TF Serving would get. Ports are free ones unless given.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from loadtest.servers import free_port, model_available

__all__ = ["EmbeddedServer", "REPO_ROOT"]

REPO_ROOT = Path(__file__).resolve().parents[2]


class EmbeddedServer:
    """A ``python -m serving.server`` process; a context manager.

    ``args`` are extra TF Serving flags (``--model_config_file=...``). On
    entry it waits until every model in ``wait_for`` has an AVAILABLE version
    (over REST), or raises with the server's log tail.
    """

    def __init__(self, args: Sequence[str], *, wait_for: Sequence[str] = (),
                 grpc_port: Optional[int] = None, rest_port: Optional[int] = None,
                 log_path: Optional[Path] = None, timeout: float = 180.0,
                 env: Optional[dict] = None) -> None:
        self.grpc_port = grpc_port or free_port()
        self.rest_port = rest_port or free_port()
        self.args = [f"--port={self.grpc_port}", f"--rest_api_port={self.rest_port}", *args]
        self.wait_for = list(wait_for)
        self.timeout = timeout
        self.log_path = log_path
        self.env = env
        self.proc: Optional[subprocess.Popen] = None
        self._log = None

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def start(self) -> "EmbeddedServer":
        if self.log_path is None:
            import tempfile
            self.log_path = Path(tempfile.mkstemp(prefix="embedded-server-", suffix=".log")[1])
        self._log = open(self.log_path, "wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2", **(self.env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "serving.server", *self.args],
            cwd=REPO_ROOT, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.timeout
        pending = list(self.wait_for)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"embedded server exited with {self.proc.returncode}:\n{self.log_tail()}")
            pending = [m for m in pending if not self._available(m)]
            if not pending and self._rest_up():
                return
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"embedded server not ready for {pending}:\n{self.log_tail()}")

    def _rest_up(self) -> bool:
        # A TCP connect, not an HTTP request: a probe request would be counted
        # in the server's request metrics.
        try:
            socket.create_connection(("127.0.0.1", self.rest_port), timeout=1.0).close()
            return True
        except OSError:
            return False

    def _available(self, model: str) -> bool:
        return model_available(self.rest_url, model, timeout=1.0)

    def log_tail(self, lines: int = 60) -> str:
        if not self.log_path or not Path(self.log_path).exists():
            return ""
        return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-lines:])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> Optional[int]:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log:
            self._log.close()
            self._log = None
        return self.proc.returncode

    def __enter__(self) -> "EmbeddedServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
