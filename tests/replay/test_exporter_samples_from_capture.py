"""``python -m exporter export --samples CAPTURE``: goldens and warmup from captured requests, served with warmup.

A real user model (``tests.support.user_models:sequential``: ``x`` float32
[batch, 4]) exported by the real CLI from capture files written with
TensorFlow's TFRecord writer and TF Serving's official protos; the export is
then loaded by the embedded server with ``--enable_model_warmup``, whose log
and Prometheus page say how many warmup records it replayed.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import io

import numpy as np
import pytest

from exporter.__main__ import main as exporter_main
from exporter.manifest import load_manifest
from exporter.warmup import read_warmup
from serving import codec
from tests.replay.captures import T0, Captured, write_capture
from tests.support.exporter import run_cli
from tests.support.serving import MONITORING_PATH
from tests.support.servers import EmbeddedServer

pytestmark = pytest.mark.slow
FACTORY = "tests.support.user_models:sequential"
ROWS_PER_REQUEST = (3, 1, 2, 3, 1, 2)   # 12 rows in 6 requests: every warmup batch above 3 spans requests
BATCH_SIZES = (1, 2, 4, 8)


def request_rows(index: int, rows: int) -> np.ndarray:
    """Rows that say where they came from: request ``index``, row ``r`` holds ``100 * index + r`` everywhere."""
    return np.repeat((100.0 * index + np.arange(rows, dtype=np.float32))[:, None], 4, axis=1).astype(np.float32)


def requests(first_index: int = 0, start: float = T0, model: str = "mlp") -> list[Captured]:
    return [Captured({"x": request_rows(first_index + i, n)}, start + 0.5 * i, model=model)
            for i, n in enumerate(ROWS_PER_REQUEST)]


def concatenated(first_index: int = 0) -> np.ndarray:
    return np.concatenate([request_rows(first_index + i, n) for i, n in enumerate(ROWS_PER_REQUEST)])


@pytest.fixture(scope="module")
def batching_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("batching") / "batching.config"
    path.write_text("max_batch_size { value: 8 }\n" + "".join(f"allowed_batch_sizes: {n}\n" for n in BATCH_SIZES))
    return path


def export_cli(repo, batching_config, samples, *extra, name="mlp"):
    return run_cli(["export", "--from", FACTORY, "--name", name, "--samples", str(samples), "--model-repo",
                    str(repo), "--batching-config", str(batching_config), "--quiet", *extra])


def warmup_batches(version_dir) -> list[np.ndarray]:
    return [codec.tensor_proto_to_ndarray(r.predict_log.request.inputs["x"]) for r in read_warmup(version_dir)]


def test_capture_file_gives_goldens_and_warmup_batches_of_concatenated_rows_that_the_server_replays(
        tmp_path, batching_config):
    capture = write_capture(tmp_path / "capture.tfrecord", requests())
    result = export_cli(tmp_path / "models", batching_config, capture)
    assert result.returncode == 0, result.stderr
    version = tmp_path / "models" / "mlp" / "1"
    manifest = load_manifest(version)
    assert manifest.warmup["records"] == 4 and manifest.warmup["batch_sizes"] == [1, 2, 4, 8]
    assert "6 Predict requests of 'mlp'" in manifest.warmup["source"]
    rows = concatenated()
    assert [b.shape[0] for b in warmup_batches(version)] == [1, 2, 4, 8]
    for batch in warmup_batches(version):   # each batch: the captured rows in order, across requests
        np.testing.assert_array_equal(batch, rows[:len(batch)])
    np.testing.assert_array_equal(manifest.golden_inputs("serving_default")["x"], rows)
    assert manifest.golden_source == "user"

    flags = ["--model_name=mlp", f"--model_base_path={tmp_path / 'models' / 'mlp'}", "--enable_model_warmup=true",
             f"--monitoring_config_file={tmp_path / 'monitoring.config'}"]
    (tmp_path / "monitoring.config").write_text(f'prometheus_config {{ enable: true, path: "{MONITORING_PATH}" }}\n')
    with EmbeddedServer(flags, wait_for=["mlp"], log_path=tmp_path / "server.log") as server:
        import httpx

        page = httpx.get(server.rest_url + MONITORING_PATH, timeout=60).text
    log = (tmp_path / "server.log").read_text(errors="replace")
    assert "Number of warmup records read: 4." in log
    replayed = [line for line in page.splitlines()
                if line.startswith(":tensorflow:serving:model_warmup_records_read{") and 'status="OK"' in line]
    assert len(replayed) == 1 and float(replayed[0].rsplit(" ", 1)[1]) == 4, page


def run_main(args) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = exporter_main(args)
    return code, err.getvalue()


def export_in_process(repo, batching_config, samples, *extra):
    return run_main(["export", "--from", FACTORY, "--name", "mlp", "--samples", str(samples), "--model-repo",
                     str(repo), "--batching-config", str(batching_config), "--quiet", *extra])


def test_directory_and_time_window_take_only_the_requests_inside_it(tmp_path, batching_config):
    captures = tmp_path / "captures"
    captures.mkdir()
    write_capture(captures, requests(0, T0))
    write_capture(captures, requests(10, T0 + 3600))   # an hour later, another file
    (captures / "capture-embedded-server-20251206T100000Z-000002.tfrecord.part").write_bytes(b"half written")
    since = dt.datetime.fromtimestamp(T0 + 3600, dt.timezone.utc).isoformat().replace("+00:00", "Z")
    code, err = export_in_process(tmp_path / "later", batching_config, captures, "--since", since)
    assert code == 0, err
    np.testing.assert_array_equal(load_manifest(tmp_path / "later" / "mlp" / "1").golden_inputs("serving_default")["x"],
                                  concatenated(10))
    code, err = export_in_process(tmp_path / "earlier", batching_config, captures, "--until", str(T0 + 3600))
    assert code == 0, err
    version = tmp_path / "earlier" / "mlp" / "1"
    np.testing.assert_array_equal(warmup_batches(version)[-1], concatenated(0)[:8])
    code, err = export_in_process(tmp_path / "both", batching_config, captures)   # the whole directory
    assert code == 0, err
    assert "12 Predict requests" in load_manifest(tmp_path / "both" / "mlp" / "1").warmup["source"]


@pytest.mark.parametrize("bad, rule", [
    ({"x": np.zeros((2, 4), np.float64)}, "input 'x' is float64; signature 'serving_default' takes float32"),
    ({"x": np.zeros((2, 5), np.float32)}, "input 'x' has shape [2, 5]; signature 'serving_default' takes [-1, 4]"),
    ({"y": np.zeros((2, 4), np.float32)}, "lacks input(s) 'x' and has input(s) 'y' the signature does not take"),
])
def test_capture_that_does_not_fit_the_signature_is_refused_naming_the_input_and_rule(tmp_path, batching_config,
                                                                                     bad, rule):
    capture = write_capture(tmp_path / "bad.tfrecord", [*requests()[:2], Captured(bad, T0 + 5, model="mlp")])
    code, err = export_in_process(tmp_path / "models", batching_config, capture)
    assert code == 2 and rule in err and "captured request 3" in err, err
    assert "Traceback" not in err and not (tmp_path / "models" / "mlp").exists()


def test_empty_window_unreadable_and_empty_directory_exit_2_naming_the_rule(tmp_path, batching_config):
    capture = write_capture(tmp_path / "c.tfrecord", requests())
    code, err = export_in_process(tmp_path / "m", batching_config, capture, "--since", str(T0 + 3600))
    assert code == 2 and "no captured Predict request between 2025-12-06T09:00:00Z and the end" in err, err
    (tmp_path / "empty").mkdir()
    code, err = export_in_process(tmp_path / "m", batching_config, tmp_path / "empty")
    assert code == 2 and "holds no capture files" in err, err
    broken = tmp_path / "broken.tfrecord"
    broken.write_bytes(capture.read_bytes()[:-7])
    code, err = export_in_process(tmp_path / "m", batching_config, broken)
    assert code == 2 and "not a readable capture" in err, err
    code, err = export_in_process(tmp_path / "m", batching_config, capture, "--until", str(T0), "--since",
                                  str(T0 + 1))
    assert code == 2 and "--until" in err and "must be after --since" in err, err
