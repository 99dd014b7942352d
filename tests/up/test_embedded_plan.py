"""The compose `tfserving` command, remapped for the embedded server (no server started)."""
from __future__ import annotations

import pytest

from serving.checkout import REPO_ROOT
from serving.config import load_model_server_config
from serving.config.compose import ComposeError, load_compose_model, plan_embedded_server, remap_server_args
from serving.model_repo import model_versions
from serving.stack.choice import compose_files
from tests.support.compose import PASSWORD, compose_env


@pytest.fixture(scope="module")
def cpu_service() -> dict:
    files = compose_files("embedded")
    return load_compose_model(files, services=["tfserving"],
                              env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD))["services"]["tfserving"]


def test_plan_keeps_every_flag_and_remaps_only_container_paths(cpu_service, tmp_path):
    plan = plan_embedded_server(cpu_service, work_dir=tmp_path, models_dir=tmp_path / "models")
    command = cpu_service["command"]
    assert [a.split("=")[0] for a in plan.args] == [a.split("=")[0] for a in command]
    changed = {a for a in plan.args if a not in command}
    assert changed == {f"--model_config_file={tmp_path / 'models.config'}",
                       f"--monitoring_config_file={REPO_ROOT / 'serving/monitoring.config'}"}
    assert "--per_process_gpu_memory_fraction=0.8" in plan.args  # left for the server to report as a no-op


def test_plan_renders_the_models_config_with_host_base_paths(cpu_service, tmp_path):
    plan = plan_embedded_server(cpu_service, work_dir=tmp_path, models_dir=tmp_path / "models")
    local = load_model_server_config(plan.models_config)
    committed = load_model_server_config(REPO_ROOT / "serving/models.cpu.config")
    assert [e.name for e in local.model_config_list.config] == [e.name for e in committed.model_config_list.config]
    for mine, theirs in zip(local.model_config_list.config, committed.model_config_list.config):
        assert mine.base_path == str(tmp_path / "models" / theirs.name)
        assert mine.version_labels == theirs.version_labels
        assert mine.model_version_policy == theirs.model_version_policy


def test_plan_can_serve_a_subset_and_rejects_unknown_models(cpu_service, tmp_path):
    plan = plan_embedded_server(cpu_service, work_dir=tmp_path, models=["digits"])
    assert [e.name for e in load_model_server_config(plan.models_config).model_config_list.config] == ["digits"]
    with pytest.raises(ComposeError, match="resnet50_trt_fp16"):
        plan_embedded_server(cpu_service, work_dir=tmp_path, models=["resnet50_trt_fp16"])


def test_overrides_replace_drop_or_append_flags():
    args = remap_server_args(["--port=8500", "--rest_api_port=8501", "--model_config_file=/etc/x/m.config"],
                             {"/etc/x": REPO_ROOT}, {"port": "9000", "rest_api_port": None, "extra": "1"})
    assert args == ["--port=9000", f"--model_config_file={REPO_ROOT / 'm.config'}", "--extra=1"]


def test_models_without_a_version_are_the_ones_to_export(cpu_service, tmp_path):
    repo = tmp_path / "models"
    for name in ("digits", "text", "ranker", "resnet50"):
        (repo / name / "1").mkdir(parents=True)
    (repo / "digits_xla" / ".export-host-1-abcd").mkdir(parents=True)  # an unfinished export is no version
    plan = plan_embedded_server(cpu_service, work_dir=tmp_path, models_dir=repo)
    served = load_model_server_config(plan.models_config).model_config_list.config
    assert [e.name for e in served if not model_versions(repo / e.name)] == ["digits_xla", "resnet50_xla"]
