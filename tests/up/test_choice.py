"""How `make up` picks compose-gpu, compose-cpu or the embedded server.

A Docker engine cannot run here, so a stand-in `docker` executable answers
`docker info` the way an engine with and without the NVIDIA runtime does.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.certs import init_secrets
from serving.checkout import REPO_ROOT
from serving.config.served_config import STATE_FILE, read_state
from serving.stack.choice import choose_backend, docker_runtimes
from serving.stack.cli import main
from serving.stack.embedded import ensure_commands
from tests.support.docker_cli import CPU_ENGINE, fake_docker_cli, set_environ

NO_ENGINE = "echo 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock.' >&2; exit 1"
GPU_ENGINE = """echo '{"io.containerd.runc.v2":{"path":"runc"},"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}}'"""


def fake_docker(tmp_path: Path, body: str) -> str:
    path = tmp_path / "docker"
    path.write_text(f"#!/bin/sh\n[ \"$1\" = info ] || exit 64\n{body}\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("body, backend, why", [
    (GPU_ENGINE, "compose-gpu", "with the nvidia runtime"),
    (CPU_ENGINE, "compose-cpu", "without the nvidia runtime"),
    (NO_ENGINE, "embedded", "Cannot connect to the Docker daemon"),
])
def test_backend_follows_what_docker_info_reports(tmp_path, body, backend, why):
    choice = choose_backend(*docker_runtimes(fake_docker(tmp_path, body)))
    assert choice.backend == backend
    assert why in choice.reason


def test_missing_docker_command_means_embedded():
    choice = choose_backend(*docker_runtimes("/nonexistent/docker"))
    assert choice.backend == "embedded"
    assert "no `/nonexistent/docker` command" in choice.reason


def test_make_up_says_what_it_chose_and_why(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "serving.stack", "--dry-run", "--docker", fake_docker(tmp_path, CPU_ENGINE),
                           "--work-dir", str(tmp_path / "work")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("make up: compose-cpu: a Docker engine answers without the nvidia runtime")


def test_compose_backend_refuses_to_start_without_a_grafana_password(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GRAFANA_ADMIN_PASSWORD"}
    proc = subprocess.run([sys.executable, "-m", "serving.stack", "--backend", "compose-gpu", "--work-dir", str(tmp_path / "work")],
                          cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2
    assert "GRAFANA_ADMIN_PASSWORD is not set" in proc.stderr


def test_missing_models_are_exported_with_one_ensure_per_variant(tmp_path):
    commands = ensure_commands(tmp_path, ["digits", "digits_xla", "text", "resnet50_xla"])
    tails = [cmd[cmd.index("--variant"):] for cmd in commands]
    assert tails == [["--variant", "fp32", "digits", "text"], ["--variant", "xla", "digits", "resnet50"]]
    assert all(cmd[1:4] == ["-m", "exporter", "ensure"] for cmd in commands)
    with pytest.raises(ValueError, match="digits_trt"):
        ensure_commands(tmp_path, ["digits_trt"])
    batching = tmp_path / "batching.cpu.config"
    assert all(f"--batching-config={batching}" in cmd for cmd in ensure_commands(tmp_path, ["digits"], batching))


def test_compose_backend_runs_compose_up_with_the_variants_files_and_prints_the_ports(tmp_path, checkout,
                                                                                    monkeypatch, capsys):
    """A stand-in `docker` answers `info` and `compose up`; `compose config` is the real Compose binary.
    A copy of the checkout (the `checkout` fixture) is the project, so the files make up prepares are its."""
    calls = tmp_path / "calls"
    fake = fake_docker_cli(tmp_path / "bin", calls)
    secrets = init_secrets(tmp_path / "secrets").directory  # the gateway's files (make certs)
    set_environ(monkeypatch, PATH=f"{fake.parent}:{os.environ['PATH']}", GRAFANA_ADMIN_PASSWORD="test-only-password",
                GATEWAY_SECRETS_HOST_DIR=str(secrets))
    work = tmp_path / "work"
    assert main(["--work-dir", str(work)], root=checkout) == 0
    stdout = capsys.readouterr().out
    assert calls.read_text().split() == ["-f", str(checkout / "docker-compose.yml"),
                                         "-f", str(checkout / "docker-compose.cpu.yml"),
                                         "up", "-d", "--build", "--wait"]
    # Through the gateway: TLS with the local CA and a client key (TF Serving publishes no port).
    assert (f'curl --cacert {secrets}/ca.crt -H "x-api-key: $(cat {secrets}/client.api-key)" '
            "https://127.0.0.1:8501/v1/models/digits") in stdout
    assert "Grafana: http://127.0.0.1:3000" in stdout
    # The state the rollout and serving.config default to: the CPU file in the work dir (seeded from
    # serving/), container paths under models/.
    state = read_state(work / STATE_FILE)
    # The rollout and serving.config push through the gateway: TLS with the local CA, the admin key.
    assert (state.backend, state.models_config, state.grpc, state.rest) == (
        "compose-cpu", work / "compose" / "models.cpu.config", "127.0.0.1:8500", "https://127.0.0.1:8501")
    assert (state.root_certificates, state.admin_key_file) == (secrets / "ca.crt", secrets / "admin.api-key")
    assert dict(state.mounts) == {"/models": checkout / "models"} == {"/models": state.model_repo}
