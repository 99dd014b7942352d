"""``python -m serving.rollout analyze --inputs CAPTURE``: captured requests replayed on stable and canary.

digits version 1 (the suite's export) is ``stable``; version 2 is either a
copy of it or its classes shuffled (``tests.rollout.v2_models``), served as
``canary`` by the embedded server on free ports. The capture holds real
digits rows (the export's goldens) in requests of 1 to 3 rows, written with
TensorFlow's TFRecord writer and TF Serving's official protos. The CLI runs in
this process over gRPC; latency limits are wide (a shared 2-core machine is no
place to judge latency): the outputs decide.
"""
from __future__ import annotations

import contextlib
import io
import json
import shutil

import numpy as np
import pytest

from exporter.manifest import load_manifest
from serving.rollout.cli import main
from tests.replay.captures import T0, Captured, write_capture
from tests.rollout.v2_models import build_wrapped
from tests.support.canary_stack import MODEL, canary_server
from tests.support.models import cached_export

pytestmark = pytest.mark.slow
SIZES = (1, 2, 3, 1, 2, 1, 3, 2, 1, 1, 2, 3)   # 12 requests of 22 rows
WIDE = ("--max-p50-ratio", "100", "--max-p99-ratio", "100", "--rounds", "2")


@pytest.fixture(scope="module")
def digits_v1():
    return cached_export((MODEL,)) / MODEL / "1"


def captured(digits_v1, start: float, first: int = 0) -> list[Captured]:
    images = load_manifest(digits_v1).golden_inputs("serving_default")["images"]
    out, row = [], first
    for i, n in enumerate(SIZES):
        take = np.arange(row, row + n) % len(images)
        out.append(Captured({"images": images[take]}, start + 0.1 * i, model=MODEL))
        row += n
    return out


@pytest.fixture(scope="module")
def captures(digits_v1, tmp_path_factory):
    root = tmp_path_factory.mktemp("captures")
    directory = root / "dir"
    directory.mkdir()
    write_capture(directory, captured(digits_v1, T0))
    write_capture(directory, captured(digits_v1, T0 + 600, first=5))   # ten minutes later
    return {"file": write_capture(root / "one.tfrecord", captured(digits_v1, T0)), "dir": directory}


def stack(tmp_path, digits_v1, v2):
    repo, work = tmp_path / "models", tmp_path / "server"
    shutil.copytree(digits_v1, repo / MODEL / "1")
    shutil.copytree(v2, repo / MODEL / "2")
    work.mkdir()
    return repo, work, canary_server(repo, work, {"stable": 1, "canary": 2})


def analyze(server, repo, work, *args) -> tuple[int, dict, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["analyze", MODEL, "--grpc", server.grpc_target, "--config-file", str(work / "models.config"),
                     "--model-repo", str(repo), "--work-dir", str(work), "--json", *WIDE, *args])
    return code, (json.loads(out.getvalue()) if out.getvalue().strip() else {}), err.getvalue()


def checks(report):
    return {c["name"]: c for c in report["checks"]}


def test_capture_fails_a_shuffled_version_2_on_top1_agreement(tmp_path, digits_v1, captures):
    shuffled = build_wrapped(digits_v1, tmp_path / "shuffled", "shuffled")
    repo, work, serving = stack(tmp_path, digits_v1, shuffled)
    with serving as server:
        # both versions wrap version 1's weights, which analyze would judge element-wise: top-1 is asked for
        code, report, err = analyze(server, repo, work, "--inputs", str(captures["file"]), "--mode", "retrain")
    assert code == 1 and report["verdict"] == "FAIL", err
    agreement = checks(report)["agreement:probabilities"]
    assert agreement["verdict"] == "FAIL" and agreement["value"] < 0.5
    assert "22 of 22 rows" in agreement["detail"]   # every captured row, each request as it was sent
    assert report["errors"]["stable"]["requests"] == 2 * len(SIZES)
    print(f"shuffled v2: {report['verdict']}, top-1 agreement {agreement['value']:.3f}")


def test_capture_directory_and_window_pass_an_identical_version_2(tmp_path, digits_v1, captures):
    repo, work, serving = stack(tmp_path, digits_v1, digits_v1)
    with serving as server:
        code, report, err = analyze(server, repo, work, "--inputs", str(captures["dir"]), "--mode", "retrain")
        assert code == 0 and report["verdict"] == "PASS", err
        agreement = checks(report)["agreement:probabilities"]
        assert agreement["value"] == 1.0 and report["errors"]["stable"]["requests"] == 2 * 2 * len(SIZES)
        code, windowed, err = analyze(server, repo, work, "--inputs", str(captures["dir"]),
                                      "--since", "2025-12-06T08:05:00Z", "--until", str(T0 + 3600))
    assert code == 0 and windowed["verdict"] == "PASS", err
    assert windowed["errors"]["stable"]["requests"] == 2 * len(SIZES)   # the later file's requests only
    print(f"identical v2: {report['verdict']}, top-1 agreement {agreement['value']:.3f}, "
          f"{report['errors']['stable']['requests']} calls a side; window: {windowed['errors']['stable']['requests']}")


def test_capture_that_is_empty_in_the_window_or_does_not_fit_exits_2(tmp_path, digits_v1, captures):
    repo, work, serving = stack(tmp_path, digits_v1, digits_v1)
    bad = write_capture(tmp_path / "bad.tfrecord", [Captured({"images": np.zeros((2, 8, 8), np.float32)}, T0,
                                                             model=MODEL)])
    with serving as server:
        code, _, err = analyze(server, repo, work, "--inputs", str(captures["file"]), "--since", str(T0 + 3600))
        assert code == 2 and "no captured Predict request between" in err, err
        code, _, err = analyze(server, repo, work, "--inputs", str(bad))
        assert code == 2 and "input 'images' has shape [2, 8, 8]" in err and "Traceback" not in err, err
        code, _, err = analyze(server, repo, work, "--inputs", "manifest", "--since", str(T0))
        assert code == 2 and "--since/--until select requests of a capture" in err, err
