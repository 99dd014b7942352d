"""``python -m serving.client`` as a subprocess against the real test servers."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.support.servers import REPO_ROOT


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "serving.client", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(params=["grpc", "rest"])
def where(request, grpc_target, rest_url):
    return ["--grpc", grpc_target] if request.param == "grpc" else ["--rest", rest_url]


def test_predict_from_npy_prints_outputs_as_json(where, tmp_path):
    path = tmp_path / "images.npy"
    np.save(path, np.ones((2, 8, 8, 1), np.float32))
    done = _cli("predict", *where, "--model", "digits", "--input", str(path))
    assert done.returncode == 0, done.stderr
    outputs = json.loads(done.stdout)["outputs"]
    assert np.array(outputs["probabilities"]).shape == (2, 10)


def test_predict_from_json_uses_the_signature_dtypes(where, tmp_path):
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps({"ids": [1, 2], "weights": [[0.5, 1, 2], [0, 0, 0]], "text": ["a", "b"]}))
    done = _cli("predict", *where, "--model", "multi", "--version", "1", "--input", str(path))
    assert done.returncode == 0, done.stderr
    outputs = json.loads(done.stdout)["outputs"]
    assert outputs["ids_out"] == [2, 4] and outputs["echo_bytes"] == [{"b64": "YQ=="}, {"b64": "Yg=="}]
    assert outputs["score"] == [4.5, 2.0]


def test_metadata_and_status_commands(where):
    meta = _cli("metadata", *where, "--model", "digits")
    assert meta.returncode == 0, meta.stderr
    signature = json.loads(meta.stdout)["signatures"]["serving_default"]
    assert signature["inputs"]["images"] == {"dtype": "DT_FLOAT", "shape": [-1, 8, 8, 1],
                                             "name": "serving_default_images:0"}
    versions = _cli("status", *where, "--model", "digits", "--version", "1")
    assert json.loads(versions.stdout) == [{"version": 1, "state": "AVAILABLE", "error_code": "OK",
                                            "error_message": ""}]


def test_serving_errors_print_json_on_stderr_and_exit_1(where):
    done = _cli("status", *where, "--model", "ghost")
    assert done.returncode == 1 and done.stdout == ""
    assert json.loads(done.stderr) == {"error": "Could not find any versions of model ghost", "code": "NOT_FOUND"}


def test_classify_and_regress_from_example_json(where, tmp_path):
    examples = tmp_path / "examples.json"
    examples.write_text(json.dumps({"examples": [{"text": "hello"}], "context": {"lang": "en"}}))
    done = _cli("classify", *where, "--model", "text", "--signature", "classification", "--input", str(examples))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"results": [[["pos", 0.5], ["neg", 0.5]]]}
    examples.write_text(json.dumps([{"x": [1.5, 2.5]}]))
    done = _cli("regress", *where, "--model", "text", "--signature", "regression", "--input", str(examples))
    assert json.loads(done.stdout) == {"results": [4.0]}
