"""``make gpu-report`` / ``python -m benchmarks.gpu``: the preflight here, its checks, and the report's rendering.

This machine has no GPU and no Docker: the real preflight must refuse with exit
code 3 and the reason, measuring nothing. The report is rendered from
``data/gpu_measurements.json``, which is RECORDED INPUT written by hand in the
shape the report records; it is not a measurement and describes no real GPU.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import gpu
from serving.checkout import REPO_ROOT
from serving.stack.docker import Engine

RECORDED_INPUT = Path(__file__).parent / "data" / "gpu_measurements.json"


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this host has an NVIDIA driver")
def test_preflight_refuses_here_with_exit_3_and_the_reason_and_no_numbers():
    result = subprocess.run([sys.executable, "-m", "benchmarks.gpu"], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == gpu.EXIT_PREFLIGHT, result.stdout + result.stderr
    assert "FAIL  nvidia-smi: nvidia-smi is not on PATH" in result.stdout
    assert "fix: install or upgrade the NVIDIA driver" in result.stdout
    assert "preflight failed" in result.stderr and "nothing was measured" in result.stderr
    assert not re.search(r"req/s|\d+(\.\d+)? ms\b", result.stdout + result.stderr)


def _ran(stdout: str = "", returncode: int = 0, stderr: str = ""):
    return lambda argv: subprocess.CompletedProcess(list(argv), returncode, stdout, stderr)


def test_each_failed_check_names_its_fix():
    old = gpu.check_driver("470.82.01")
    assert not old[0].ok and "525.60.13" in old[0].detail and "driver" in old[0].fix
    assert [c.warning for c in gpu.check_driver("530.30.02")] == [False, True]  # runs CUDA 12, but no PTX JIT
    assert all(c.ok for c in gpu.check_driver("550.54.15"))
    kepler = gpu.check_compute_capability(gpu.Gpu("Tesla K80", "470", "3.7", "11441 MiB"))
    assert not kepler[0].ok and "5.0" in kepler[0].fix
    pascal = gpu.check_compute_capability(gpu.Gpu("Tesla P100", "550", "6.0", "16280 MiB"))
    assert pascal[0].ok and pascal[1].warning and "tensor cores" in pascal[1].detail
    runtime = gpu.check_container_runtime(Engine(True, frozenset({"runc"}), "a Docker engine answers", "docker"))
    assert not runtime.ok and "nvidia-ctk runtime configure" in runtime.fix
    assert gpu.check_container_runtime(Engine(True, frozenset({"nvidia", "runc"}), "answers", "docker")).ok
    silent = gpu.check_container_runtime(Engine(False, frozenset(), "no Docker engine answers (...)", "docker"))
    assert not silent.ok and "start the Docker daemon" in silent.fix
    image = gpu.check_tfserving_image("tensorflow/serving:2.17.1-gpu", present=False)
    assert not image.ok and "never pulled" in image.detail and "docker pull tensorflow/serving:2.17.1-gpu" in image.detail


def test_preflight_reads_nvidia_smi_and_docker_info(tmp_path):
    # nvidia-smi gives a fixed output and a stand-in `docker` answers like a GPU host's engine that has
    # TF Serving's GPU image: this machine has no GPU, and its real engine's answers cannot be chosen.
    docker = tmp_path / "docker"
    docker.write_text('#!/bin/sh\ncase "$1" in info) echo \'{"nvidia": {}, "runc": {}}\' ;; '
                      'image) echo sha256:0 ;; *) exit 64 ;; esac\n')
    docker.chmod(0o755)
    outputs = {"nvidia-smi": "NVIDIA A10G, 550.54.15, 8.6, 23028 MiB\n"}
    checks, gpus = gpu.preflight(run=lambda argv: _ran(outputs[argv[0]])(argv), which=lambda name: f"/usr/bin/{name}",
                                 docker=str(docker))
    assert gpus == [gpu.Gpu("NVIDIA A10G", "550.54.15", "8.6", "23028 MiB")]
    assert [c.name for c in checks] == ["nvidia-smi", "driver", "compute capability", "NVIDIA container runtime",
                                        "TF Serving GPU image"]
    assert all(c.ok for c in checks), checks


def test_report_renders_from_recorded_input_not_a_measurement():
    measurements = json.loads(RECORDED_INPUT.read_text())
    assert measurements["_comment"].startswith("RECORDED INPUT") and "NOT a measurement" in measurements["_comment"]
    text = gpu.render_report(measurements)
    assert "| XLA | off (fp32) | `jit_compile` + --xla_cpu_compilation_enabled | 12.00 → 8.00 | +33 % |" in text
    assert ("| TensorRT | off (fp32) | TF-TRT FP16 engines | 12.00 → 5.00 | +267 % | top-1 agreement 99.60 %, "
            "max abs diff 0.0123 |") in text
    # the tuner's own table follows, with the GPU dimensions searched and the flags to paste
    assert "| GPU memory (--per_process_gpu_memory_fraction) |" in text
    assert "--xla_cpu_compilation_enabled=true" not in text.split("## Flags to use")[1]  # trt-fp16 won, not xla
    assert "## Flags to use" in text and "--enable_batching=true" in text


def test_render_flag_prints_the_report_from_a_file(capsys):
    assert gpu.main(["--render", str(RECORDED_INPUT)]) == 0
    assert "# GPU-host report: resnet50 on Example GPU" in capsys.readouterr().out
