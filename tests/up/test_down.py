"""`make down` (`python -m serving.stack down`) where nothing runs (the pid checks: tests/up/test_stack_guard.py).

Stopping a running stack is tested where one runs: the embedded backend in
tests/up/test_stack_state.py, the compose backend in tests/e2e.
"""
from __future__ import annotations

import os
import subprocess
import sys

from serving.checkout import REPO_ROOT
from serving.config.served_config import STATE_FILE, StackState, write_state
from serving.stack.down import stop_stack
from serving.stack.identity import start_time


def _state(tmp_path, pid):
    return StackState("embedded", tmp_path / "models.config", "127.0.0.1:1", "http://127.0.0.1:2", tmp_path, pid=pid)


def test_down_without_a_state_file_says_nothing_runs(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "serving.stack", "down", "--work-dir", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"make down: nothing runs: no {tmp_path / STATE_FILE} (make up writes it)\n"


def test_down_after_the_embedded_stack_exited_says_nothing_runs(tmp_path, capsys):
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    write_state(_state(tmp_path, exited.pid).replace(pid_start=1), tmp_path / STATE_FILE)
    assert stop_stack(tmp_path) == 0
    assert "nothing runs: the embedded stack's make up (pid" in capsys.readouterr().out


def test_a_pid_that_is_not_make_up_is_left_alone(tmp_path, capsys):
    """A pid reused by another process (here this test's own, recorded with another start time) is not signalled."""
    write_state(_state(tmp_path, os.getpid()).replace(pid_start=start_time(os.getpid()) + 1), tmp_path / STATE_FILE)
    assert stop_stack(tmp_path) == 0
    assert "nothing runs" in capsys.readouterr().out
