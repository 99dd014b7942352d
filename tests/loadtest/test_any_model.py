"""Load tests of a model with no manifest anywhere, on a server known only by its address.

``user_mlp`` (``user_model.py``) is a SavedModel saved by ``tf.saved_model.save``
with no manifest; the embedded server serves it. ``python -m loadtest`` runs as a
subprocess with no ``--model-repo``: the payload comes from the server's
metadata, from ``--input-data``, or is refused asking for ``--shape``.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from serving.checkout import REPO_ROOT
from tests.support.user_model import MODEL_NAME

pytestmark = pytest.mark.slow

METADATA_SOURCE = f"synthesized from the metadata of '{MODEL_NAME}'"


def loadtest(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loadtest", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout)


def _server(server, protocol: str) -> list[str]:
    return ["--grpc", server.grpc_target] if protocol == "grpc" else ["--rest", server.rest_url]


def _steady_args(server, protocol: str, out_dir: Path, *extra: str) -> list[str]:
    return ["run", "steady", *_server(server, protocol), "--model", MODEL_NAME, "--run-time", "3s", "-u", "2",
            "--out", str(out_dir), *extra]


def run_steady(server, protocol: str, out_dir: Path, *extra: str) -> tuple[dict, str]:
    """A 3 s steady run of ``user_mlp`` with no --model-repo; its summary (checked clean) and stdout."""
    out = loadtest(*_steady_args(server, protocol, out_dir, *extra))
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(Path(out_dir, f"steady_{protocol}_summary.json").read_text())
    assert summary["requests"] > 0
    assert summary["failures"] == 0, summary["failures_by_error"]
    assert summary["run_ok"] and summary["passed"]
    return summary, out.stdout


@pytest.mark.parametrize("protocol", ["grpc", "rest"])
def test_run_loads_a_model_without_manifest_from_the_servers_metadata(user_model_server, tmp_path, protocol):
    summary, stdout = run_steady(user_model_server, protocol, tmp_path, "--batch-size", "3")
    assert summary["payload"]["source"].startswith(METADATA_SOURCE)
    assert summary["payload"]["inputs"] == {"features": "float32[3, 4]", "bucket": "int64[3]"}
    assert f"payload: {METADATA_SOURCE}" in stdout


def test_sweep_loads_a_model_without_manifest_over_grpc_and_rest(user_model_server, tmp_path):
    out = loadtest("sweep", "--grpc", f"grpc://{user_model_server.grpc_target}",
                   "--rest", user_model_server.rest_url, "--model", MODEL_NAME, "--signature", "length",
                   "--concurrency", "1,2", "--window", "0.5", "--stable-windows", "2", "--max-level-time", "3",
                   "--warmup", "0.3", "--out", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    series = json.loads((tmp_path / "sweep.json").read_text())["series"]
    # both protocols were given and --protocol was not: both are swept
    assert [s["protocol"] for s in series] == ["grpc", "rest"]
    for one in series:
        assert one["payload"]["source"].startswith(METADATA_SOURCE)
        assert one["payload"]["inputs"] == {"text": "string[1]"}
        assert [lvl["level"] for lvl in one["levels"]] == [1, 2]
        for lvl in one["levels"]:
            assert lvl["requests"] > 0 and lvl["errors"] == 0, lvl["error_kinds"]


def test_an_unknown_dimension_is_refused_asking_for_shape_and_works_with_it(user_model_server, tmp_path):
    refused = loadtest(*_steady_args(user_model_server, "grpc", tmp_path, "--signature", "pooled"))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "input 'tokens' has an unknown dimension after the batch" in refused.stderr
    assert "--shape tokens:d1,d2" in refused.stderr
    assert not (tmp_path / "steady_grpc_summary.json").exists()  # refused before locust started

    summary, _ = run_steady(user_model_server, "grpc", tmp_path, "--signature", "pooled", "--shape", "tokens:5")
    assert summary["payload"]["inputs"] == {"tokens": "float32[1, 5]"}


def test_input_data_npz_is_sent_as_given(user_model_server, tmp_path):
    data = tmp_path / "inputs.npz"
    np.savez(data, features=np.ones((2, 4), np.float32), bucket=np.array([0, 1], np.int64))
    summary, _ = run_steady(user_model_server, "grpc", tmp_path, "--input-data", str(data))
    assert summary["payload"]["source"] == f"input file {data}"
    assert summary["payload"]["inputs"] == {"features": "float32[2, 4]", "bucket": "int64[2]"}


def test_input_data_rest_body_is_typed_by_the_metadata_and_cycled_to_the_batch_size(user_model_server, tmp_path):
    body = tmp_path / "request.json"
    body.write_text(json.dumps({"instances": [{"features": [1, 2, 3, 4], "bucket": 1},
                                              {"features": [0.5, 0, 0, 1], "bucket": 0}]}))
    summary, _ = run_steady(user_model_server, "rest", tmp_path, "--input-data", str(body), "--batch-size", "5")
    assert summary["payload"]["source"] == f"input file {body}"
    # JSON numbers typed by the signature (int64 bucket, float32 features), rows cycled to 5
    assert summary["payload"]["inputs"] == {"features": "float32[5, 4]", "bucket": "int64[5]"}


def test_locust_run_by_hand_builds_the_payload_from_its_hosts_metadata(user_model_server, tmp_path):
    prefix = tmp_path / "by_hand"
    out = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(REPO_ROOT / "loadtest" / "locustfiles" / "steady.py"),
         "--headless", "--host", f"grpc://{user_model_server.grpc_target}", "-u", "2", "-r", "2",
         "--run-time", "3s", "--stop-timeout", "5s", "--csv", str(prefix), "--model", MODEL_NAME,
         "--model-repo", str(tmp_path / "empty"), "GrpcUser"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"from {METADATA_SOURCE} at grpc {user_model_server.grpc_target}" in out.stderr
    final = json.loads(Path(f"{prefix}_final.json").read_text())
    assert final["requests"] > 0 and final["failures"] == 0, final["errors"]


def test_tune_needs_no_manifest(user_model_tune):
    out, tmp_path = user_model_tune  # intra-op threads, then batching
    summary = json.loads((tmp_path / "tune.json").read_text())
    assert summary["payload"]["source"].startswith(METADATA_SOURCE)
    search = summary["trials"][1]
    assert search["dimension"] == "batching" and search["score_rps"] > 0 and search["baseline_rps"] > 0, out.stdout
    # the tuned column names what was adopted above it, e.g. "on (with intra_op=1)"
    assert "| TF Serving batching (--enable_batching) | off | on" in (tmp_path / "tune.md").read_text()
    # no xla export of a user's model here: the variant dimension says so instead of failing
    assert "export it with" in summary["skipped"]["variant:xla"]
