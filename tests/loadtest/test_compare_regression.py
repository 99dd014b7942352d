"""``compare`` on real sweeps: a deliberately worse config is flagged, the same config twice passes.

How this stays deterministic on a noisy 2-core machine shared with other work:

- The worse config is slow by construction, not by luck: the same digits model
  served with batching whose only ``allowed_batch_sizes`` entry is 4096, so
  every one-example request is padded to 4096 rows (TF Serving's padding rule),
  ~30 ms of TensorFlow work against ~0.4 ms (measured in-process here: 28.5 ms
  and 0.38 ms). A batching timeout no longer makes a config slow at
  concurrency 1: a batch that holds every waiting caller closes at once. The
  good config (no batching) answers in about a millisecond, i.e. at least 4x
  faster even on a loaded machine, where both scale alike: a -75 % or worse
  change, against a limit of 50 %.
- The two runs of the good config are compared with ``--max-regression 50%``:
  a false alarm needs the second run to be twice as slow as the first, a few
  seconds later, at concurrency 1. The windows' own spread widens the band
  further when the machine is that unsteady.
- The three sweeps run back to back against two servers that are up at the
  same time (good, bad, good), so the machine's load changes little between them.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from serving.checkout import REPO_ROOT
from tests.support.servers import EmbeddedServer

# alone: the same config measured twice must pass, which noise from a test on the other worker can break.
pytestmark = [pytest.mark.slow, pytest.mark.alone]

SLOW_BATCHING = {"max_batch_size": 4096, "allowed_batch_sizes": [4096], "batch_timeout_micros": 0,
                 "num_batch_threads": 1, "max_enqueued_batches": 16}


def _loadtest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loadtest", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)


def _sweep(server: EmbeddedServer, model_repo, out) -> None:
    result = _loadtest("sweep", "--model-repo", str(model_repo), "--grpc", server.grpc_target, "--concurrency", "1",
                       "--window", "1", "--stable-windows", "2", "--max-level-time", "5", "--warmup", "0.5",
                       "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr


def test_compare_flags_a_worse_config_and_passes_the_same_config_twice(model_repo, tmp_path):
    digits = {"digits": model_repo / "digits"}
    with EmbeddedServer.for_models(digits, workdir=tmp_path / "good") as good, \
            EmbeddedServer.for_models(digits, workdir=tmp_path / "bad", batching=SLOW_BATCHING) as bad:
        _sweep(good, model_repo, tmp_path / "run1")
        _sweep(bad, model_repo, tmp_path / "worse")
        _sweep(good, model_repo, tmp_path / "run2")
    run1, run2, worse = (str(tmp_path / d / "sweep.json") for d in ("run1", "run2", "worse"))

    same = _loadtest("compare", run1, run2, "--max-regression", "50%")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "PASS" in same.stdout

    regressed = _loadtest("compare", run1, worse, "--max-regression", "50%")
    assert regressed.returncode == 1, regressed.stdout + regressed.stderr
    assert "REGRESSION" in regressed.stdout
    # both gated metrics moved: throughput down, p50 up
    lines = [line for line in regressed.stdout.splitlines() if "digits/grpc/batching-running" in line]
    assert len(lines) == 2 and all("REGRESSION" in line for line in lines), regressed.stdout
