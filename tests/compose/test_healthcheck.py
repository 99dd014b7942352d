"""tfserving's compose healthcheck (and so the Kubernetes probes) is the user's: healthy when every model
of the served config has a version AVAILABLE, whatever their names.

The script Compose gives the container runs here, under this host's bash, against the embedded server
(real REST answers): only the server's command line (/proc/1/cmdline in the container) and its REST port
are pointed at this test's. The upstream image's bash, grep and timeout are the same programs; running it
inside tensorflow/serving itself cannot be done here (no registry answers).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from serving.config.compose import load_compose_model
from serving.config.files import model_config_text
from serving.launcher import ServerProcess
from tests.support.compose import CPU, GPU, PASSWORD, compose_env


def healthcheck_script(files: list[Path]) -> str:
    test = load_compose_model(files, env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD))["services"]["tfserving"][
        "healthcheck"]["test"]
    assert test[:3] == ["CMD", "bash", "-c"]
    return test[3].replace("$$", "$")  # Compose's escaped $, as the engine (and the kubelet) unescape it


@pytest.mark.parametrize("files", [GPU, CPU], ids=["gpu", "cpu"])
def test_the_healthcheck_names_no_model_and_reads_the_servers_own_config(files):
    script = healthcheck_script(files)
    assert "digits" not in script and "TFS_HEALTHCHECK_MODEL" not in script
    assert "/proc/1/cmdline" in script and "--model_config_file=" in script


def _check(script: str, args: list[str], rest_port: int, tmp_path: Path) -> subprocess.CompletedProcess:
    cmdline = tmp_path / "cmdline"
    cmdline.write_bytes(b"".join(a.encode() + b"\0" for a in ["/usr/bin/tensorflow_model_server", *args]))
    local = script.replace("/proc/1/cmdline", str(cmdline)).replace("127.0.0.1/8501", f"127.0.0.1/{rest_port}")
    return subprocess.run(["bash", "-c", local], capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_healthy_when_the_served_models_are_available_whatever_their_names(model_repo, tmp_path):
    """A stack serving only a user's model (no digits) is healthy. Before: the check asked for digits."""
    script = healthcheck_script(CPU)
    shutil.copytree(model_repo / "digits", tmp_path / "repo" / "my_model")
    with ServerProcess.for_models({"my_model": tmp_path / "repo" / "my_model"}, workdir=tmp_path / "work",
                                  timeout=300) as server:
        args = server.args
        ok = _check(script, args, server.rest_port, tmp_path)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        # A served config naming a model the server has not got AVAILABLE: unhealthy, and it says which.
        config = tmp_path / "wider.config"
        config.write_text(model_config_text({"my_model": tmp_path / "repo" / "my_model",
                                             "not_loaded": tmp_path / "repo" / "not_loaded"}))
        wider = [a if not a.startswith("--model_config_file=") else f"--model_config_file={config}" for a in args]
        bad = _check(script, wider, server.rest_port, tmp_path)
        assert bad.returncode != 0 and "not_loaded: no version AVAILABLE" in bad.stdout, bad.stdout + bad.stderr
        # No model served at all: healthy while REST answers.
        empty = tmp_path / "empty.config"
        empty.write_text("# name: \"commented_out\"\nmodel_config_list {\n}\n")
        none = [a if not a.startswith("--model_config_file=") else f"--model_config_file={empty}" for a in args]
        assert _check(script, none, server.rest_port, tmp_path).returncode == 0
        port = server.rest_port
    # The server is gone: unhealthy.
    assert _check(script, args, port, tmp_path).returncode != 0
