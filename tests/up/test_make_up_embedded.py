"""`make up` without Docker: the embedded server, started with the compose `tfserving` command.

`python -m serving.stack --backend embedded` reads the CPU variant's command with
the real Compose binary, remaps its paths to this checkout and starts
`python -m serving.server` with it, serving what the model repository holds.
Given a repository with every model of models.cpu.config (all but the GPU-only
TensorRT model), that this server serves each of them under both labels shows
that the compose command, the batching and monitoring configs and the
exporter's repository fit together.
"""
from __future__ import annotations

import re
from pathlib import Path
import subprocess
import sys

import httpx
import numpy as np
import pytest

from serving import codec
from serving.checkout import REPO_ROOT
from serving.config import load_model_server_config
from serving.config.compose import load_compose_model
from serving.config.served_config import STATE_FILE, read_state
from tests.support.compose import GPU, PASSWORD, compose_env
from tests.support.ports import free_port
from tests.support.processes import MakeUpEmbedded

pytestmark = pytest.mark.slow
SERVED = [e.name for e in load_model_server_config(REPO_ROOT / "serving/models.cpu.config").model_config_list.config]


@pytest.fixture(scope="module")
def make_up(cpu_stack_repo, tmp_path_factory):
    """`python -m serving.stack --backend embedded` on free ports, until every model is AVAILABLE."""
    work = tmp_path_factory.mktemp("up")
    grpc_port, rest_port = free_port(), free_port()
    log = work / "up.log"
    up = MakeUpEmbedded(cpu_stack_repo, work, f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{rest_port}", log, 600)
    up.start(lambda: "\nServing: " in up.text(), "make up", 660, every=0.5)
    try:
        yield {"rest": up.rest, "rest_port": rest_port, "grpc_port": grpc_port,
               "log": log, "repo": cpu_stack_repo, "work": work}
    finally:
        up.stop(60)


def test_make_up_says_it_chose_the_embedded_server_and_how_to_call_it(make_up):
    text = make_up["log"].read_text()
    assert text.startswith("make up: embedded: --backend embedded")
    assert f"curl {make_up['rest']}/v1/models/digits" in text
    assert f"python -m serving.client --grpc 127.0.0.1:{make_up['grpc_port']} --model digits" in text
    assert "GrpcClient" in text


def test_the_printed_client_commands_work(make_up):
    commands = [line.strip() for line in make_up["log"].read_text().splitlines()
                if line.strip().startswith("python -m serving.client --grpc")]
    assert [c.split()[-1] for c in commands] == ["status", "metadata"]
    outputs = []
    for command in commands:
        proc = subprocess.run([sys.executable, *command.split()[1:]], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout)
    assert "AVAILABLE" in outputs[0]
    assert "serving_default" in outputs[1]


@pytest.mark.parametrize("name", SERVED)
def test_every_cpu_model_is_available_under_both_labels(make_up, name):
    for suffix in ("", "/labels/stable", "/labels/canary"):
        response = httpx.get(f"{make_up['rest']}/v1/models/{name}{suffix}", timeout=30)
        assert response.status_code == 200, response.text
        assert [(v["version"], v["state"]) for v in response.json()["model_version_status"]] == [("1", "AVAILABLE")]


@pytest.mark.parametrize("name", SERVED)
def test_every_cpu_model_answers_its_golden_inputs(make_up, name):
    from exporter.manifest import load_manifest

    manifest = load_manifest(make_up["repo"] / name / "1")
    inputs, expected = manifest.golden_inputs(), manifest.golden_outputs()
    body = codec.inputs_to_rest_request(inputs, row_format=False)
    response = httpx.post(f"{make_up['rest']}/v1/models/{name}/labels/stable:predict", content=body, timeout=120)
    assert response.status_code == 200, response.text[:500]
    outputs = codec.rest_response_to_outputs(response.content, output_names=list(expected))
    assert set(outputs) >= set(expected)
    for key, want in expected.items():
        if want.dtype.kind == "f":
            np.testing.assert_allclose(outputs[key], want, rtol=1e-3, atol=1e-3, err_msg=f"{name}:{key}")
        else:
            assert np.asarray(outputs[key]).shape == want.shape, f"{name}:{key}"


def healthcheck_script(rest_port: int, cmdline: str) -> str:
    """The container's healthcheck for this host: the server's own command line is ``cmdline`` (a
    /proc/PID/cmdline) instead of the container's /proc/1/cmdline, its REST port ``rest_port``."""
    service = load_compose_model(GPU, env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD))["services"]["tfserving"]
    script = service["healthcheck"]["test"][3].replace("$$", "$")  # Compose's escaped $, as the engine reads it
    return (script.replace("/dev/tcp/127.0.0.1/8501", f"/dev/tcp/127.0.0.1/{rest_port}")
            .replace("/proc/1/cmdline", cmdline))


def test_the_compose_healthcheck_passes_against_the_running_server(make_up):
    """The check reads the config the running server's command line names (make up's served config)."""
    server = read_state(make_up["work"] / STATE_FILE).server_pid
    script = healthcheck_script(make_up["rest_port"], f"/proc/{server}/cmdline")
    proc = subprocess.run(["bash", "-c", script], capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_compose_healthcheck_fails_for_a_model_that_is_not_served(make_up, tmp_path):
    server = read_state(make_up["work"] / STATE_FILE).server_pid
    argv = Path(f"/proc/{server}/cmdline").read_bytes().split(b"\0")
    config = tmp_path / "wider.config"
    served = (make_up["work"] / "models.config").read_text()
    config.write_text(served.replace("model_config_list {", 'model_config_list {\n  config {\n    name: "not_served"\n'
                                     '    base_path: "/nowhere"\n    model_platform: "tensorflow"\n  }', 1))
    wider = tmp_path / "cmdline"
    wider.write_bytes(b"\0".join(a if not a.startswith(b"--model_config_file=") else
                                  b"--model_config_file=" + str(config).encode() for a in argv))
    proc = subprocess.run(["bash", "-c", healthcheck_script(make_up["rest_port"], str(wider))],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "not_served: no version AVAILABLE" in proc.stdout, proc.stdout + proc.stderr


def test_prometheus_path_from_monitoring_config_serves_tf_serving_metrics(make_up):
    response = httpx.get(f"{make_up['rest']}/monitoring/prometheus/metrics", timeout=30)
    assert response.status_code == 200
    assert re.search(r"^:tensorflow:serving:request_count\{", response.text, re.M)


def test_make_up_prints_progress_and_the_banner_and_the_server_logs_to_its_file(make_up):
    text, server_log = make_up["log"].read_text(), make_up["work"] / "server.log"
    assert f"server log: {server_log}" in text
    assert "batching: off (no --enable_batching: each request runs on its own)" in text  # the CPU variant's
    assert "source .venv/bin/activate" in text and "Stop: make down" in text
    assert "Successfully loaded servable version" in server_log.read_text()
    assert "Successfully loaded servable version" not in text
    assert all(line.startswith(("make up", " ", "Serving: ", "print(", "Stop: ")) for line in text.splitlines()
               if line), text


def test_gpu_only_flags_are_reported_as_no_ops(make_up):
    text = (make_up["work"] / "server.log").read_text()
    for flag in ("per_process_gpu_memory_fraction",):
        assert re.search(rf"--{flag}\S* .*(no effect|no-op)", text), flag
