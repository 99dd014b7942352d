"""``examples/train_and_export.py`` run as a user runs it: killed midway and resumed, then exported.

The script runs as a subprocess (``python examples/train_and_export.py`` from the checkout, with
the checkout on ``PYTHONPATH``). The kill follows the script's own progress: it is sent once the
line for the checkpoint of epoch ``KILL_AFTER`` is read, never after a sleep.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest
from sklearn.datasets import load_digits

from exporter.manifest import load_manifest
from serving.checkout import REPO_ROOT
from serving.codec import DEFAULT_SIGNATURE
from serving.model_repo import latest_version_dir

SCRIPT = REPO_ROOT / "examples" / "train_and_export.py"
EPOCHS = 10
KILL_AFTER = 3
RUN_TIMEOUT = 300


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


def _command(args: Sequence[str]) -> list[str]:
    return [sys.executable, str(SCRIPT), *args]


def _run(args: Sequence[str]) -> subprocess.CompletedProcess:
    return subprocess.run(_command(args), cwd=REPO_ROOT, env=_env(), capture_output=True, text=True,
                          timeout=RUN_TIMEOUT)


def _kill_after_epoch(args: Sequence[str], epoch: int, stderr_path: Path) -> tuple[int, str]:
    """Start the script, SIGKILL it once it reports epoch ``epoch``'s checkpoint; (returncode, stdout)."""
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(_command(args), cwd=REPO_ROOT, env=_env(), stdout=subprocess.PIPE,
                                stderr=stderr, text=True)
        try:
            seen = []
            for line in proc.stdout:
                seen.append(line)
                if line.startswith(f"epoch {epoch}/"):
                    proc.send_signal(signal.SIGKILL)
                    break
            seen.append(proc.stdout.read())
            return proc.wait(timeout=RUN_TIMEOUT), "".join(seen)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()


def _checkpointed_epoch(checkpoints: Path) -> int:
    """The epoch of the latest checkpoint, read from CheckpointManager's index file (``ckpt-N``)."""
    match = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"$', (checkpoints / "checkpoint").read_text(), re.M)
    assert match, (checkpoints / "checkpoint").read_text()
    return int(match.group(1))


def _reported_epochs(stdout: str) -> list[int]:
    return [int(n) for n in re.findall(rf"^epoch (\d+)/{EPOCHS}: .*; checkpoint ", stdout, re.M)]


def _held_out_accuracy(stdout: str) -> float:
    match = re.search(r"held-out accuracy ([0-9.]+)", stdout)
    assert match, stdout
    return float(match.group(1))


@dataclass(frozen=True)
class ResumedRun:
    """The script killed after epoch ``KILL_AFTER`` (``--no-export``), then run again to the end and exported."""

    tmp: Path
    work_dir: Path
    repo: Path
    first_returncode: int
    first: str
    checkpointed: int
    second: subprocess.CompletedProcess


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> ResumedRun:
    """One killed and resumed training run that both tests read: the resume, and the export at its end
    (a run of the script costs a TensorFlow start and its epochs)."""
    tmp = tmp_path_factory.mktemp("train")
    work_dir, repo = tmp / "work", tmp / "models"
    args = ["--work-dir", str(work_dir), "--epochs", str(EPOCHS)]
    returncode, first = _kill_after_epoch([*args, "--no-export"], KILL_AFTER, tmp / "first.stderr")
    # read before the second run moves it on; -1 when the script was not killed (the test says so)
    checkpointed = _checkpointed_epoch(work_dir / "checkpoints") if returncode == -signal.SIGKILL else -1
    second = _run([*args, "--model-repo", str(repo), "--name", "digits_mlp"])
    return ResumedRun(tmp, work_dir, repo, returncode, first, checkpointed, second)


@pytest.mark.slow
def test_a_killed_run_resumes_after_its_last_checkpointed_epoch_and_finishes(resumed):
    first, work_dir = resumed.first, resumed.work_dir
    assert resumed.first_returncode == -signal.SIGKILL, (first, (resumed.tmp / "first.stderr").read_text()[-3000:])
    assert f"starting at epoch 1/{EPOCHS}" in first
    # The kill may land a little after the watched line: the checkpoint index says where it stopped.
    checkpointed = resumed.checkpointed
    assert KILL_AFTER <= checkpointed < EPOCHS, first

    second = resumed.second
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"resumed from epoch {checkpointed}/{EPOCHS}" in second.stdout, second.stdout
    assert _reported_epochs(second.stdout) == list(range(checkpointed + 1, EPOCHS + 1)), second.stdout
    assert f"trained {EPOCHS}/{EPOCHS} epochs ({EPOCHS - checkpointed} in this run)" in second.stdout
    assert _held_out_accuracy(second.stdout) > 0.8
    assert _checkpointed_epoch(work_dir / "checkpoints") == EPOCHS


@pytest.mark.slow
def test_the_trained_model_is_published_with_a_manifest_and_held_out_goldens(resumed):
    repo, result = resumed.repo, resumed.second
    assert result.returncode == 0, result.stderr[-3000:]

    published = re.findall(r"^published fp32: (.+)$", result.stdout, re.M)
    assert [Path(p) for p in published] == [latest_version_dir(repo / "digits_mlp")], result.stdout
    version_dir = Path(published[0])
    assert (version_dir / "saved_model.pb").is_file() and (version_dir / "manifest.json").is_file()

    signature = load_manifest(version_dir).signatures[DEFAULT_SIGNATURE]
    assert list(signature.inputs) == ["images"] and signature.inputs["images"].shape == (None, 8, 8)
    assert all(spec.dtype == np.float32 for spec in signature.outputs.values()), signature.outputs
    # The goldens are real held-out digits, not synthesized inputs.
    real = {image.astype(np.float32).tobytes() for image in load_digits().images}
    goldens = load_manifest(version_dir).golden_inputs()["images"]
    assert len(goldens) and all(row.astype(np.float32).tobytes() in real for row in goldens)
