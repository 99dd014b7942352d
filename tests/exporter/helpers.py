"""Shared helpers of the exporter tests: run the CLI as a real subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Sequence

from tests.support.servers import REPO_ROOT

__all__ = ["SMALL_MODELS", "run_cli", "cli_env"]

SMALL_MODELS = ("digits", "text", "ranker")


def cli_env() -> dict[str, str]:
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}


def run_cli(args: Sequence[str], timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m exporter ARGS`` from the repo root; output captured as text."""
    return subprocess.run([sys.executable, "-m", "exporter", *args], cwd=REPO_ROOT, env=cli_env(),
                          capture_output=True, text=True, timeout=timeout)
