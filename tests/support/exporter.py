"""The exporter tests' helpers: the CLI run as a real subprocess, a SavedModel run as TF Serving runs it."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Sequence

from serving.checkout import REPO_ROOT
from tests.support.models import SMALL_MODELS

__all__ = ["SMALL_MODELS", "run_cli", "cli_env", "session_predict", "nothing_published"]

def cli_env() -> dict[str, str]:
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}


def run_cli(args: Sequence[str], timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m exporter ARGS`` from the repo root; output captured as text."""
    return subprocess.run([sys.executable, "-m", "exporter", *args], cwd=REPO_ROOT, env=cli_env(),
                          capture_output=True, text=True, timeout=timeout)


def session_predict(version_dir, inputs, signature: str = "serving_default") -> dict:
    """Outputs of one signature run the way TF Serving runs it: a TF1 Session on the SavedModel, fed by tensor names."""
    import tensorflow as tf

    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(version_dir))
        sig = meta_graph.signature_def[signature]
        return session.run({k: t.name for k, t in sig.outputs.items()},
                           {sig.inputs[k].name: v for k, v in inputs.items()})


def nothing_published(out) -> bool:
    """True when the model repository ``out`` holds no file or directory at all (no version, no staging)."""
    return not out.exists() or list(out.rglob("*")) == []
