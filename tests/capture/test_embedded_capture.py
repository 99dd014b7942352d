"""Request capture in the real embedded server (``python -m serving.server``) on free ports.

Real gRPC and REST calls; files read back after the server stopped (a stop
writes what is queued and closes the file).
"""
from __future__ import annotations

import re
import stat
import subprocess
import sys
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from serving import codec, status
from serving.capture import read_capture
from serving.checkout import REPO_ROOT
from serving.server.flags import ServerFlags, validate_flags
from tests.support.servers import EmbeddedServer
from tests.support.serving import tiny_flags
from tests.support.wait import wait_until

X = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0]], np.float32)
RECORDS = ":tensorflow:serving:request_capture_records"


def _config(repo: Path, path: Path) -> Path:
    entries = "".join(f'config {{ name: "{name}" base_path: "{repo / "tiny"}" model_platform: "tensorflow" }} '
                      for name in ("tiny", "other"))
    path.write_text(f"model_config_list {{ {entries}}}\n")
    return path


def _predict(stub, model: str = "tiny", **metadata: str) -> None:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    codec.ndarray_to_tensor_proto(X, request.inputs["x"])
    stub.Predict(request, timeout=30, metadata=tuple(metadata.items()) or None)


def _rest_predict(server: EmbeddedServer, model: str = "tiny") -> None:
    reply = httpx.post(f"{server.rest_url}/v1/models/{model}:predict", json={"instances": X.tolist()}, timeout=30)
    assert reply.status_code == 200, reply.text


def _record_count(server: EmbeddedServer, outcome: str) -> float:
    page = httpx.get(server.metrics_url, timeout=30).text
    line = f'{RECORDS}{{outcome="{outcome}"}} '
    return next(float(row[len(line):]) for row in page.splitlines() if row.startswith(line))


def test_sampled_share_exact_excluded_model_never_written_and_modes(tiny_repo: Path, tmp_path: Path):
    capture = tmp_path / "new" / "capture"
    flags = [f"--model_config_file={_config(tiny_repo, tmp_path / 'models.config')}",
             f"--monitoring_config_file={tiny_repo / 'monitoring.config'}",
             f"--request_capture_dir={capture}", "--request_capture_sample_rate=0.25",
             "--request_capture_exclude_models=other"]
    with EmbeddedServer(flags, wait_for=["tiny", "other"]) as server:
        with grpc.insecure_channel(server.grpc_target) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            for _ in range(20):
                _predict(stub, **{"x-api-key": "SECRET-API-KEY-42", "authorization": "Bearer TOKEN-XYZZY"})
                _rest_predict(server)
            for _ in range(5):
                _predict(stub, "other")
        assert _record_count(server, "excluded") == 5
        wait_until(lambda: _record_count(server, "written") == 10, "10 of 40 requests written")
        assert stat.S_IMODE(capture.stat().st_mode) == 0o700
        server.stop()
    records = list(read_capture(capture))
    assert len(records) == 10 and {r.model for r in records} == {"tiny"}
    files = list(capture.iterdir())
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 and f.suffix == ".tfrecord" for f in files)
    data = b"".join(f.read_bytes() for f in files)
    assert b"SECRET-API-KEY-42" not in data and b"TOKEN-XYZZY" not in data


def test_budget_reached_stops_capture_keeps_serving_and_says_which_setting(tiny_repo: Path, tmp_path: Path):
    capture = tmp_path / "capture"
    budget = 1000
    flags = tiny_flags(tiny_repo, f"--request_capture_dir={capture}", "--request_capture_sample_rate=1",
                       f"--request_capture_max_bytes={budget}")
    with EmbeddedServer(flags, wait_for=["tiny"]) as server:
        with grpc.insecure_channel(server.grpc_target) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            for _ in range(20):
                _predict(stub)   # every request answers: capture stops, the server does not
        wait_until(lambda: _record_count(server, "written") + _record_count(server, "dropped_budget") == 20,
                   "all 20 requests written or dropped")
        assert _record_count(server, "dropped_budget") > 0
        page = httpx.get(server.metrics_url, timeout=30).text
        assert ':tensorflow:serving:request_capture_stopped{reason="max_total_bytes"} 1' in page
        assert f':tensorflow:serving:request_capture_budget_bytes{{budget="max_total_bytes"}} {budget}' in page
        _rest_predict(server)   # still serving after the budget is reached
        written = _record_count(server, "written")
        server.stop()
        log = server.log_path.read_text()
    assert sum(f.stat().st_size for f in capture.iterdir()) <= budget
    assert len(list(read_capture(capture))) == written
    assert log.count("request capture stopped") == 1
    assert f"the budget max_total_bytes={budget} is reached (raise --request_capture_max_bytes" in log


def _serve(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "serving.server", *flags], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=180, check=False)


@pytest.mark.parametrize("flag, message", [
    ({"request_capture_sample_rate": 1.5}, "--request_capture_sample_rate must be between 0 and 1"),
    ({"request_capture_sample_rate": float("nan")}, "--request_capture_sample_rate must be between 0 and 1"),
    ({"request_capture_max_bytes": 0}, "--request_capture_max_bytes must be positive"),
    ({"request_capture_queue_size": -1}, "--request_capture_queue_size must be positive"),
    ({"request_capture_max_bytes_per_day": -1}, "--request_capture_max_bytes_per_day must be positive, or 0"),
    ({"request_capture_exclude_models": "a,,b"}, "--request_capture_exclude_models must be comma-separated"),
])
def test_bad_capture_flags_are_refused_naming_the_flag(flag: dict, message: str):
    with pytest.raises(status.InvalidArgument, match=re.escape(message)):
        validate_flags(ServerFlags(model_base_path="/models/m", **flag))


def test_a_bad_sample_rate_refuses_the_start_with_exit_255():
    result = _serve("--model_base_path=/nonexistent", "--request_capture_dir=/tmp/unused",
                    "--request_capture_sample_rate=1.5")
    assert result.returncode == 255 and "Traceback" not in result.stderr
    assert "--request_capture_sample_rate must be between 0 and 1 (a share of the requests), not 1.5" in result.stderr


def test_a_capture_dir_that_cannot_be_made_refuses_the_start(tmp_path: Path):
    (tmp_path / "file").write_text("")
    result = _serve("--model_base_path=/nonexistent", f"--request_capture_dir={tmp_path / 'file' / 'capture'}")
    assert result.returncode == 255, result.stderr
    assert f"--request_capture_dir={tmp_path / 'file' / 'capture'} cannot be used" in result.stderr
