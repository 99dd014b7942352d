"""The project's CLIs run as a user runs them: ``python -m MODULE ARGS`` from the checkout, output captured."""
from __future__ import annotations

import subprocess
import sys

from tests.support.servers import REPO_ROOT

__all__ = ["run_module", "run_loadtest"]


def run_module(module: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m module args`` in the checkout (text output, not checked: the test reads the exit code)."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout)


def run_loadtest(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m loadtest args``."""
    return run_module("loadtest", *args, timeout=timeout)
