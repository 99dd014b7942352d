"""The project's CLIs run as a user runs them: ``python -m MODULE ARGS`` from the checkout, output captured."""
from __future__ import annotations

import subprocess
import sys
import time

from loadtest.__main__ import main as loadtest_main
from serving.checkout import REPO_ROOT

__all__ = ["run_module", "run_loadtest", "loadtest_refused"]


def run_module(module: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m module args`` in the checkout (text output, not checked: the test reads the exit code)."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout)


def run_loadtest(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m loadtest args``."""
    return run_module("loadtest", *args, timeout=timeout)


def loadtest_refused(capsys, argv: list[str]) -> str:
    """``python -m loadtest ARGV`` in this process must exit 2 at once (a preflight, not the run): its one
    stderr line."""
    began = time.monotonic()
    assert loadtest_main(argv) == 2
    assert time.monotonic() - began < 30
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"python -m loadtest {argv[0]}: error: "), err
    return err
