"""Helpers for the tests of the served config, ``serving.config`` and the rollout CLI: the config CLI as a
subprocess, model directories outside the zoo, a work dir as make up leaves it, and a port that counts
connections (a server that must not be called)."""
from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

from serving.checkout import REPO_ROOT
from serving.config.models import render_repository_config, write_model_server_config
from serving.config.served_config import STATE_FILE, StackState, write_state

__all__ = ["run_cli", "user_model", "embedded_stack", "Listener"]


def run_cli(*args: str, module: str = "serving.config", timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m <module> args`` from the checkout (output captured)."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout)


def user_model(repo: Path, name: str = "my_mlp", versions=(1,)) -> Path:
    """A model directory outside the zoo: numeric versions holding a saved_model.pb, no manifest."""
    for version in versions:
        (repo / name / str(version)).mkdir(parents=True)
        (repo / name / str(version) / "saved_model.pb").write_bytes(b"")
    return repo / name


def embedded_stack(tmp_path: Path, repo: Path, grpc: str = "127.0.0.1:1") -> Path:
    """A work dir as make up's embedded backend leaves it: stack.json and the served config of ``repo``."""
    work = tmp_path / "work"
    work.mkdir()
    write_model_server_config(render_repository_config(repo), work / "models.config")
    write_state(StackState("embedded", work / "models.config", grpc, "http://127.0.0.1:2", repo), work / STATE_FILE)
    return work


class Listener:
    """A TCP port on 127.0.0.1 that accepts and counts connections and hands each to ``handle``: by default
    it closes them at once, standing in for a server that must not be called."""

    def __init__(self, handle: Callable[[socket.socket], None] = socket.socket.close) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.target = f"127.0.0.1:{self.port}"
        self.accepted = 0
        self._handle = handle
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self._handle(conn)

    def close(self) -> int:
        """Stop listening; the number of connections accepted."""
        self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() under way (a close alone does not, on Linux)
        self.sock.close()
        self.thread.join(5)
        assert not self.thread.is_alive(), "the listener's accept loop did not end"
        return self.accepted
