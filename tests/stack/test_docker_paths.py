"""Every Docker path of the CLIs and benchmarks, where an engine answers but TF Serving's image is absent:
they stop (or skip) at once with the reason, never pulling.

The fast tests put a stand-in ``docker`` first on PATH that answers ``info``
like an engine and ``image inspect`` like one without the image, and exits 64
for anything else (a ``pull`` or ``run`` would fail the test): the real
engine's answers cannot be chosen. The ``docker`` tests ask this host's
engine, which has no TF Serving image (no registry answers here).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import gpu
from benchmarks.peers import PeerUnavailable, launch_peer
from loadtest.options import UsageError
from loadtest.servers import start_server
from serving.checkout import REPO_ROOT
from serving.stack.docker import image_absent_reason, image_present, probe_engine, tfserving_image

CLIS = {"tune": ["-m", "loadtest", "tune", "--docker", "--model", "digits"],
        "sweep": ["-m", "loadtest", "sweep", "--docker", "--model", "digits", "--concurrency", "1"]}


@pytest.fixture
def engine_without_images(tmp_path, monkeypatch) -> Path:
    calls = tmp_path / "calls.log"
    docker = tmp_path / "bin" / "docker"
    docker.parent.mkdir()
    docker.write_text(f'#!/bin/sh\necho "$@" >> {calls}\ncase "$1 $2" in\n'
                      '"info "*) echo \'{"runc":{"path":"runc"}}\' ;;\n'
                      '"image inspect") echo "Error: No such image: $5" >&2; exit 1 ;;\n'
                      '*) exit 64 ;;\nesac\n')
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", f"{docker.parent}:{os.environ['PATH']}")
    return calls


def _absent(gpu_image: bool = False) -> str:
    return f"real TF Serving not run: {image_absent_reason(tfserving_image(gpu=gpu_image))}"


@pytest.mark.slow
@pytest.mark.parametrize("cli", sorted(CLIS))
def test_loadtest_docker_stops_with_the_reason(engine_without_images, cli):
    proc = subprocess.run([sys.executable, *CLIS[cli]], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"python -m loadtest {cli}: error: --docker: {_absent()}"
    called = {line.split()[0] for line in engine_without_images.read_text().splitlines()}
    assert called <= {"info", "image", "compose"}  # compose: `docker compose version`, asked by the image lookup


def test_start_server_refuses_the_gpu_image_too(engine_without_images, tmp_path):
    with pytest.raises(UsageError, match="tensorflow/serving:.*-gpu is not present locally and is never pulled"):
        start_server({"m": tmp_path / "m"}, workdir=tmp_path / "w", docker_engine=True, gpu=True)


def test_the_peers_benchmark_skips_tf_serving_with_the_reason(engine_without_images, tmp_path):
    with pytest.raises(PeerUnavailable) as raised:
        launch_peer("tfserving", "m", tmp_path / "m" / "1", tmp_path)
    assert str(raised.value) == _absent()


def test_the_gpu_preflight_fails_on_the_absent_image(engine_without_images):
    checks, _ = gpu.preflight(which=lambda name: None)
    image = next(c for c in checks if c.name == "TF Serving GPU image")
    assert not image.ok and image.detail == image_absent_reason(tfserving_image(gpu=True))


@pytest.mark.docker
@pytest.mark.slow
def test_this_hosts_engine_has_no_tf_serving_image_so_tune_stops_with_the_reason():
    engine = probe_engine()
    if not engine.answers:
        pytest.skip(f"no engine to ask: {engine.reason}")
    if image_present(tfserving_image()):
        pytest.skip(f"{tfserving_image()} is present on this host: --docker would run it")
    proc = subprocess.run([sys.executable, *CLIS["tune"]], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == f"python -m loadtest tune: error: --docker: {_absent()}"
