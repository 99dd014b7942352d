"""``python -m serving.capture``: ls, filter, sample, to-npz, to-rest over files and directories."""
from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from serving.capture import CaptureWriter, prediction_log, read_capture
from serving.capture._cli import main
from serving.codec import (
    example_from_dict,
    load_inputs,
    ndarray_to_tensor_proto,
    rest_request_to_inputs,
)
from serving.wire import apis
from tests.capture.records import predict_log

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def _classify(model: str, when: float, request_id: str):
    request = apis.ClassificationRequest()
    request.model_spec.name = model
    example_from_dict({"x": [1.0, 2.0, 3.0]}, request.input.example_list.examples.add())
    return prediction_log("classify", request, None, model=model, origin="gateway", request_id=request_id,
                          sampling_rate=1.0, signature="classification", when=when)


def _strings(when: float):
    request = apis.PredictRequest()
    request.model_spec.name = "text"
    ndarray_to_tensor_proto(np.array([b"ab", b"c"], dtype=object), request.inputs["s"])
    return prediction_log("predict", request, None, model="text", origin="gateway", request_id="s",
                          sampling_rate=1.0, signature="strings", when=when)


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    """digits: 6 Predicts of 1..6 rows at T0+0..5 s over two files; ranker: 2 Classifies; text: 1 string Predict."""
    directory = tmp_path / "capture"
    with CaptureWriter(directory, origin="gateway", max_file_bytes=1500, max_file_seconds=3600,
                       max_total_bytes=1 << 20) as writer:
        for i in range(6):
            assert writer.write(predict_log(f"d{i}", rows=i + 1, when=T0 + i))
        assert writer.write(_classify("ranker", T0 + 10, "c0"))
        assert writer.write(_classify("ranker", T0 + 11, "c1"))
        assert writer.write(_strings(T0 + 12))
    assert len(list(directory.iterdir())) >= 2
    return directory


def test_ls_counts_per_model_signature_and_method(capture: Path, capsys):
    assert main(["ls", str(capture), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [(g["model"], g["signature"], g["method"], g["records"]) for g in summary["groups"]] == [
        ("digits", "serving_default", "predict", 6), ("ranker", "classification", "classify", 2),
        ("text", "strings", "predict", 1)]
    assert summary["records"] == 9 and summary["files"] == len(list(capture.iterdir()))
    assert (summary["first"], summary["last"]) == ("2026-01-01T00:00:00.000Z", "2026-01-01T00:00:12.000Z")
    assert main(["ls", str(next(iter(sorted(capture.iterdir()))))]) == 0   # one file, as a table
    assert capsys.readouterr().out.startswith("MODEL")


def test_filter_by_model_method_and_time_window_writes_a_new_0600_file(capture: Path, tmp_path: Path):
    out = tmp_path / "cut.tfrecord"
    assert main(["filter", str(capture), "--out", str(out), "--model", "digits", "--method", "predict",
                 "--since", "2026-01-01T00:00:02Z", "--until", str(T0 + 5)]) == 0
    assert [r.request_id for r in read_capture(out)] == ["d2", "d3", "d4"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert main(["filter", str(capture), "--out", str(out)]) == 2   # never overwrites


def test_sample_is_seeded_and_count_is_exact(capture: Path, tmp_path: Path):
    picks = []
    for name in ("a", "b"):
        out = tmp_path / f"{name}.tfrecord"
        assert main(["sample", str(capture), "--out", str(out), "--count", "4", "--seed", "7"]) == 0
        picks.append([r.request_id for r in read_capture(out)])
    assert picks[0] == picks[1] and len(picks[0]) == 4
    everything = [r.request_id for r in read_capture(capture)]
    assert picks[0] == [i for i in everything if i in picks[0]]   # in their order
    assert main(["sample", str(capture), "--out", str(tmp_path / "all.tfrecord"), "--rate", "1"]) == 0
    assert len(list(read_capture(tmp_path / "all.tfrecord"))) == 9
    assert main(["sample", str(capture), "--out", str(tmp_path / "bad.tfrecord"), "--rate", "2"]) == 2


def test_to_npz_concatenates_predict_inputs_along_the_batch_dimension(capture: Path, tmp_path: Path, capsys):
    assert main(["to-npz", str(capture), "--out", str(tmp_path / "npz")]) == 0
    with np.load(tmp_path / "npz" / "digits.serving_default.npz") as digits:
        assert digits["x"].shape == (21, 4) and digits["x"].dtype == np.float32
    with np.load(tmp_path / "npz" / "text.strings.npz") as text:
        assert text["s"].tolist() == [b"ab", b"c"]
    assert "skipped 2 Classify/Regress/MultiInference records" in capsys.readouterr().out


def test_to_npz_refuses_rows_of_different_shapes_naming_the_rule(tmp_path: Path, capsys):
    directory = tmp_path / "mixed"
    with CaptureWriter(directory, origin="gateway", max_file_bytes=1 << 20, max_file_seconds=60,
                       max_total_bytes=1 << 20) as writer:
        writer.write(predict_log("a"))
        request = apis.PredictRequest()
        ndarray_to_tensor_proto(np.zeros((1, 5), np.float32), request.inputs["x"])
        writer.write(prediction_log("predict", request, model="digits", origin="gateway", request_id="wide",
                                    sampling_rate=1.0, signature="serving_default"))
    assert main(["to-npz", str(directory), "--out", str(tmp_path / "npz")]) == 2
    assert "concatenated along the batch dimension only" in capsys.readouterr().err


def test_to_rest_writes_bodies_the_server_decodes_to_the_same_rows(capture: Path, tmp_path: Path):
    out = tmp_path / "digits.jsonl"
    assert main(["to-rest", str(capture), "--model", "digits", "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 6
    inputs, row_format = rest_request_to_inputs(json.loads(lines[2]), {"x": np.float32})
    assert row_format and inputs["x"].shape == (3, 4)
    columnar = tmp_path / "columnar.jsonl"
    assert main(["to-rest", str(capture), "--model", "digits", "--format", "columnar", "--out", str(columnar)]) == 0
    assert "inputs" in json.loads(columnar.read_text().splitlines()[0])
    ranker = tmp_path / "ranker.jsonl"
    assert main(["to-rest", str(capture), "--model", "ranker", "--out", str(ranker)]) == 0
    assert json.loads(ranker.read_text().splitlines()[0]) == {"signature_name": "classification",
                                                              "examples": [{"x": [1.0, 2.0, 3.0]}]}


def test_to_rest_of_several_models_is_refused_naming_the_rule(capture: Path, capsys):
    assert main(["to-rest", str(capture)]) == 2
    assert "one model and method (one URL)" in capsys.readouterr().err


def test_npz_is_what_the_exporter_and_load_tests_read(capture: Path, tmp_path: Path):
    from serving.codec import Signature, TensorSpec

    assert main(["to-npz", str(capture), "--model", "digits", "--out", str(tmp_path / "npz")]) == 0
    signature = Signature("serving_default", "tensorflow/serving/predict",
                          inputs={"x": TensorSpec("x", np.float32, (None, 4))}, outputs={})
    loaded = load_inputs(tmp_path / "npz" / "digits.serving_default.npz", signature)
    assert loaded["x"].shape == (21, 4)


def test_a_corrupt_file_exits_2_naming_file_and_offset(tmp_path: Path):
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(b"\x05" + b"\x00" * 20)
    result = subprocess.run([sys.executable, "-m", "serving.capture", "ls", str(bad)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert f"{bad}: record at byte offset 0: length checksum mismatch" in result.stderr
    missing = subprocess.run([sys.executable, "-m", "serving.capture", "ls", str(tmp_path / "nope")],
                             capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode == 2 and "no such capture file or directory" in missing.stderr
