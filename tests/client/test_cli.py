"""``python -m serving.client`` as a subprocess against the real test servers."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from serving.checkout import REPO_ROOT
from serving.client.cli import build_parser, main


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


# ---------------------------------------------------------------- --input takes what curl takes

def _main(capsys, *args: str) -> tuple[int, str, str]:
    """The CLI in this process (cheaper than a subprocess): exit code, stdout, stderr."""
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


MULTI_ROWS = [{"ids": 1, "weights": [0.5, 1, 2], "text": "a"}, {"ids": 2, "weights": [0, 0, 0], "text": "b"}]
MULTI_COLUMNS = {"ids": [1, 2], "weights": [[0.5, 1, 2], [0, 0, 0]], "text": ["a", "b"]}


@pytest.mark.parametrize("body", [{"instances": MULTI_ROWS},
                                  {"signature_name": "serving_default", "inputs": MULTI_COLUMNS}],
                         ids=["row", "columnar"])
def test_predict_takes_a_tf_serving_rest_body(where, tmp_path, body, capsys):
    path = tmp_path / "req.json"
    path.write_text(json.dumps(body))
    code, out, err = _main(capsys, "predict", *where, "--model", "multi", "--input", str(path))
    assert code == 0, err
    outputs = json.loads(out)["outputs"]
    assert outputs["ids_out"] == [2, 4] and outputs["score"] == [4.5, 2.0]
    assert outputs["echo_bytes"] == [{"b64": "YQ=="}, {"b64": "Yg=="}]


def test_a_rest_bodys_signature_name_is_used_unless_signature_is_given(where, tmp_path, capsys):
    path = tmp_path / "req.json"
    path.write_text(json.dumps({"signature_name": "ghost", "instances": np.ones((1, 8, 8, 1)).tolist()}))
    code, out, err = _main(capsys, "predict", *where, "--model", "digits", "--input", str(path))
    assert code == 2 and out == ""
    assert err == ("python -m serving.client predict: error: model 'digits' has no signature 'ghost'; "
                   "its signatures: serving_default\n")
    code, out, err = _main(capsys, "predict", *where, "--model", "digits", "--signature", "serving_default",
                           "--input", str(path))
    assert code == 0, err
    assert np.array(json.loads(out)["outputs"]["logits"]).shape == (1, 10)


def test_predict_takes_an_npz_of_named_inputs(where, tmp_path, capsys):
    path = tmp_path / "inputs.npz"
    np.savez(path, ids=np.array([1, 2]), weights=np.zeros((2, 3), np.float32), text=np.array([b"a", b"b"]))
    code, out, err = _main(capsys, "predict", *where, "--model", "multi", "--input", str(path))
    assert code == 0, err
    assert json.loads(out)["outputs"]["ids_out"] == [2, 4]


@pytest.mark.parametrize("content, rule", [
    ('{"instances": [{"ids": 1}], "inputs": {}}', "expecting only one of 'inputs' or 'instances'"),
    ('{"instances": [{"ids": 1.5, "weights": [0, 0, 0], "text": "a"}]}', "1.5 Type: Number is not of expected type: int64"),
    ('{"ids": [1], "weights": [[0, 0, 0]], "text": [{"x": 1}]}', 'JSON Value: {"x":1} not formatted correctly for base64'),
    ("not json", "not JSON"),
], ids=["both-keys", "fraction-for-int", "object-for-string", "not-json"])
def test_a_bad_input_file_is_one_line_and_exit_2_never_a_traceback(where, tmp_path, content, rule, capsys):
    path = tmp_path / "req.json"
    path.write_text(content)
    code, out, err = _main(capsys, "predict", *where, "--model", "multi", "--input", str(path))
    assert code == 2 and out == ""
    assert err.startswith("python -m serving.client predict: error: ") and rule in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_missing_or_unknown_input_file_is_a_usage_error(where, tmp_path, capsys):
    code, out, err = _main(capsys, "predict", *where, "--model", "multi", "--input", str(tmp_path / "absent.json"))
    assert code == 2 and err.endswith("absent.json: No such file or directory\n")
    (tmp_path / "req.csv").write_text("1,2\n")
    code, out, err = _main(capsys, "predict", *where, "--model", "multi", "--input", str(tmp_path / "req.csv"))
    assert code == 2 and "must be .json (a REST body or {name: array}), .npz or .npy" in err


def test_help_shows_the_three_input_forms_with_an_example_each():
    text = build_parser().format_help()
    assert '"instances": [{"x": [1.0, 2.0]}]' in text and '"inputs": {"x": [[1.0, 2.0]]}' in text
    assert 'np.savez("in.npz"' in text and '{"x": [[1.0, 2.0]]}' in text
