"""Compose and Kubernetes run one TF Serving command line: the generated kustomize inputs match a fresh render.

``python -m deploy.k8s check`` is the gate. The copies below show it failing
when either side is edited alone: compose without regenerating, or a
generated file by hand (and a config or rule file without regenerating).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from deploy.k8s import generate
from deploy.k8s.__main__ import main
from deploy.k8s.generate import (
    Checkout,
    cpu_quantity,
    duration_seconds,
    memory_quantity,
    stale_files,
    write_all,
)
from serving.checkout import REPO_ROOT

GPU_ARGS = "deploy/k8s/components/gpu/generated/tfserving.yaml"
CPU_ARGS = "deploy/k8s/components/cpu/generated/tfserving.yaml"


def test_the_committed_generated_files_equal_a_fresh_render():
    assert stale_files(Checkout(REPO_ROOT)) == [], "run `python -m deploy.k8s generate` and commit the result"


@pytest.fixture
def checkout(tmp_path: Path) -> Checkout:
    """The sources and deploy/k8s copied into a scratch checkout, up to date."""
    for name in ("docker-compose.yml", "docker-compose.cpu.yml", ".env"):
        shutil.copy2(REPO_ROOT / name, tmp_path / name)
    (tmp_path / "serving").mkdir()
    for path in (REPO_ROOT / "serving").glob("*.config"):
        shutil.copy2(path, tmp_path / "serving" / path.name)
    shutil.copytree(REPO_ROOT / "monitoring" / "prometheus" / "rules", tmp_path / "monitoring" / "prometheus" / "rules")
    shutil.copytree(REPO_ROOT / "deploy" / "k8s", tmp_path / "deploy" / "k8s",
                    ignore=shutil.ignore_patterns("__pycache__"))
    copy = Checkout(tmp_path)
    assert stale_files(copy) == []
    return copy


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_a_compose_flag_changed_alone_fails_the_check(checkout: Checkout, capsys):
    _edit(checkout.root / "docker-compose.yml", "--rest_api_num_threads=32", "--rest_api_num_threads=48")
    assert stale_files(checkout) == [GPU_ARGS]  # docker-compose.cpu.yml overrides the whole command
    assert main(["--checkout", str(checkout.root), "check"]) == 1
    assert GPU_ARGS in capsys.readouterr().err
    # Regenerating brings Kubernetes along: the new flag is in the generated patch.
    write_all(checkout)
    assert stale_files(checkout) == []
    assert "--rest_api_num_threads=48" in (checkout.root / GPU_ARGS).read_text()


def test_a_generated_arg_edited_by_hand_fails_the_check(checkout: Checkout):
    _edit(checkout.root / CPU_ARGS, "- --enable_model_warmup=true", "- --enable_model_warmup=false")
    assert stale_files(checkout) == [CPU_ARGS]
    assert main(["--checkout", str(checkout.root), "check"]) == 1


def test_an_env_pin_changed_alone_fails_the_check(checkout: Checkout):
    _edit(checkout.root / ".env", "TF_SERVING_VERSION=2.17.1", "TF_SERVING_VERSION=2.17.0")
    stale = stale_files(checkout)
    assert GPU_ARGS in stale and CPU_ARGS in stale
    write_all(checkout)
    assert "image: tensorflow/serving:2.17.0-gpu" in (checkout.root / GPU_ARGS).read_text()


def test_a_serving_config_or_rule_changed_alone_fails_the_check(checkout: Checkout):
    _edit(checkout.root / "serving" / "monitoring.config", "enable: true", "enable: false")
    _edit(checkout.root / "monitoring" / "prometheus" / "rules" / "tfserving-alerts.yml", "for: 2m", "for: 3m")
    assert stale_files(checkout) == ["deploy/k8s/base/generated/prometheusrule.yaml",
                                     "deploy/k8s/base/generated/serving/monitoring.config"]


def test_a_left_over_generated_file_fails_the_check_and_generate_removes_it(checkout: Checkout):
    (checkout.root / "serving" / "models.cpu.config").unlink()
    assert stale_files(checkout) == ["deploy/k8s/base/generated/serving/models.cpu.config"]
    assert main(["--checkout", str(checkout.root), "generate"]) == 0
    assert not (checkout.k8s / "base" / "generated" / "serving" / "models.cpu.config").exists()
    assert main(["--checkout", str(checkout.root), "check"]) == 0


def test_the_generator_api_is_pinned():
    assert sorted(generate.__all__) == sorted([
        "VARIANTS", "Checkout", "compose_services", "container_patch", "exporter_patch", "prometheus_rule",
        "render_all", "stale_files", "write_all", "duration_seconds", "memory_quantity", "cpu_quantity"])


@pytest.mark.parametrize("text, seconds", [("10s", 10), ("10m0s", 600), ("1h30m", 5400), ("1m30.5s", 90.5),
                                           ("500ms", 0.5)])
def test_compose_durations_read_as_seconds(text, seconds):
    assert duration_seconds(text) == seconds


def test_compose_sizes_read_as_exact_kubernetes_quantities():
    assert [memory_quantity("17179869184"), memory_quantity(512 << 20), memory_quantity(1000)] == ["16Gi", "512Mi", "1000"]
    assert [cpu_quantity(4), cpu_quantity(0.5), cpu_quantity("1.25")] == ["4", "500m", "1250m"]
    with pytest.raises(ValueError, match="not a Go duration"):
        duration_seconds("10 minutes")
