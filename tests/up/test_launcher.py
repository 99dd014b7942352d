"""The one launcher of the embedded server (``serving.launcher``), which ``make up``, the load
tests, the benchmarks and the tests use: config files, readiness and failure reports."""
from __future__ import annotations

import subprocess
import sys

import pytest

from serving.checkout import REPO_ROOT
from serving.config import load_batching_parameters, load_model_server_config, load_monitoring_config
from serving.config.files import MONITORING_PATH
from serving.launcher import ServerProcess, free_port, wait_until_available


def test_for_models_writes_the_config_files_its_flags_point_at(tmp_path):
    server = ServerProcess.for_models({"digits": tmp_path / "repo" / "digits"}, workdir=tmp_path / "work",
                                      batching={"max_batch_size": 8}, extra_flags=["--file_system_poll_wait_seconds=0"])
    flags = dict(a.split("=", 1) for a in server.args)
    assert flags["--port"] == str(server.grpc_port) and flags["--rest_api_port"] == str(server.rest_port)
    (entry,) = load_model_server_config(flags["--model_config_file"]).model_config_list.config
    assert (entry.name, entry.base_path) == ("digits", str(tmp_path / "repo" / "digits"))
    assert load_batching_parameters(flags["--batching_parameters_file"]).max_batch_size.value == 8
    assert load_monitoring_config(flags["--monitoring_config_file"]).prometheus_config.path == MONITORING_PATH
    assert flags["--enable_batching"] == "true" and "--file_system_poll_wait_seconds" in flags
    assert server.wait_for == ["digits"] and server.log_path == tmp_path / "work" / "server.log"
    assert server.metrics_url == f"http://127.0.0.1:{server.rest_port}{MONITORING_PATH}"


def test_without_batching_no_batching_file_is_written(tmp_path):
    server = ServerProcess.for_models({"digits": tmp_path / "digits"}, workdir=tmp_path)
    assert not any(a.startswith(("--enable_batching", "--batching_parameters_file")) for a in server.args)
    assert not (tmp_path / "batching.config").exists()


def test_waiting_for_a_model_nobody_serves_times_out_naming_it():
    with pytest.raises(TimeoutError, match="models not AVAILABLE after 0s: digits"):
        wait_until_available(f"http://127.0.0.1:{free_port()}", ["digits"], timeout=0.3)


def test_a_server_that_exits_is_reported_with_its_log_tail_and_nothing_is_left_running(tmp_path):
    server = ServerProcess(["--model_config_file=/nonexistent/models.config"], wait_for=["digits"],
                           log_path=tmp_path / "server.log", timeout=120)
    with pytest.raises(RuntimeError, match="(?s)embedded server not ready.*--- server log tail ---"):
        server.start()
    assert server.proc is not None and server.proc.poll() is not None


def test_the_launcher_does_not_import_tensorflow():
    code = "import sys, serving.launcher; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
