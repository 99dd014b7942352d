"""``python -m serving.config check|render`` on real files and a real exported repository."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from serving.checkout import REPO_ROOT
from serving.config import load_model_server_config
from serving.config.cli import check_serving_dir
from serving.config.models import (
    ZOO,
    check_model_dirs,
    remap_base_paths,
    render_model_server_config,
    write_model_server_config,
)
from tests.support.config import run_cli, user_model

SERVING = REPO_ROOT / "serving"


@pytest.fixture
def serving_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "serving"
    dest.mkdir()
    for f in SERVING.glob("*.config"):
        shutil.copy(f, dest)
    return dest


def test_check_passes_on_the_committed_files():
    proc = run_cli("check")
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout


def test_check_fails_naming_a_label_on_a_version_that_is_not_served(serving_copy):
    path = serving_copy / "models.config"
    path.write_text(path.read_text().replace('key: "canary"\n      value: 1', 'key: "canary"\n      value: 2', 1))
    proc = run_cli("check", "--serving-dir", str(serving_copy))
    assert proc.returncode == 1
    assert "digits: label canary -> 2 points outside the served versions [1]" in proc.stderr


def test_check_fails_on_a_base_path_the_exporter_does_not_write(serving_copy):
    path = serving_copy / "models.config"
    path.write_text(path.read_text().replace('"/models/ranker"', '"/models/rankr"'))
    proc = run_cli("check", "--serving-dir", str(serving_copy))
    assert proc.returncode == 1
    assert "ranker: base_path /models/rankr is not /models/ranker" in proc.stderr
    assert "models.cpu.config" in proc.stderr  # now out of sync with the GPU config


def test_a_users_models_config_without_zoo_models_passes_check(serving_copy, tmp_path):
    user_model(tmp_path / "models")
    for name in ("models.config", "models.cpu.config"):
        (serving_copy / name).write_text('model_config_list { config { name: "my_mlp" base_path: "/models/my_mlp" '
                                         'model_platform: "tensorflow" } }\n')
    proc = run_cli("check", "--serving-dir", str(serving_copy), "--model-repo", str(tmp_path / "models"))
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout


def test_check_fails_on_a_model_outside_the_zoo_that_has_no_version(serving_copy, tmp_path):
    for path in (serving_copy / "models.config", serving_copy / "models.cpu.config"):
        path.write_text(path.read_text().replace('"text"', '"txt"').replace("/models/text", str(tmp_path / "txt")))
    proc = run_cli("check", "--serving-dir", str(serving_copy))
    assert proc.returncode == 1
    assert f"txt: no numeric version directory under {tmp_path / 'txt'}" in proc.stderr
    assert "text" not in proc.stderr.replace("txt", "")  # a zoo model left out of the config is fine
    user_model(tmp_path, "txt")
    assert "txt:" not in run_cli("check", "--serving-dir", str(serving_copy)).stderr


def test_check_holds_every_model_to_tf_servings_label_and_path_rules(serving_copy, tmp_path):
    path = serving_copy / "models.config"
    path.write_text(path.read_text().replace('key: "canary"', 'key: "can-ary"', 1)
                    .replace('"/models/ranker"', '"models/ranker"'))
    proc = run_cli("check", "--serving-dir", str(serving_copy))
    assert proc.returncode == 1
    assert "digits: label 'can-ary' is not a valid label name; labels must match [a-zA-Z0-9_]+" in proc.stderr
    assert "ranker: base_path 'models/ranker' is not absolute" in proc.stderr


def test_check_with_models_dir_reports_models_not_exported_yet(serving_copy, model_repo, tmp_path):
    repo = tmp_path / "models"
    for exported in ("digits", "text", "ranker"):  # real exports; xla and resnet50 are missing
        shutil.copytree(model_repo / exported, repo / exported)
    proc = run_cli("check", "--serving-dir", str(serving_copy), "--model-repo", str(repo), "--variant", "cpu")
    assert proc.returncode == 1
    assert "digits_xla: no numeric version directory" in proc.stderr
    assert "python -m exporter ensure" in proc.stderr
    for exported in ("digits", "text", "ranker"):
        assert f"{repo}: {exported}:" not in proc.stderr


def test_exported_versions_satisfy_the_config_they_are_rendered_from(model_repo):
    small = [m for m in ZOO if m.name in ("digits", "text", "ranker")]
    config = render_model_server_config(small, models_dir=model_repo)
    assert check_model_dirs(config, model_repo) == []


def test_a_version_without_manifest_is_reported(tmp_path):
    version = tmp_path / "digits" / "1"
    version.mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"")
    config = render_model_server_config([m for m in ZOO if m.name == "digits"])
    assert check_model_dirs(config, tmp_path) == [f"digits: {version} has no manifest.json"]


def test_render_remaps_base_paths_and_keeps_labels(tmp_path):
    source = tmp_path / "in.config"
    config = render_model_server_config(ZOO)
    config.model_config_list.config[0].version_labels["canary"] = 1
    write_model_server_config(config, source)
    out = tmp_path / "local.config"
    proc = run_cli("render", "--from-config", str(source), "--base-path-prefix", "/srv/models",
                   "--without-gpu-only", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    local = {e.name: e for e in load_model_server_config(out).model_config_list.config}
    assert local["digits"].base_path == "/srv/models/digits"
    assert "resnet50_trt_fp16" not in local
    assert dict(local["digits"].version_labels) == {"stable": 1, "canary": 1}


def test_render_all_regenerates_the_committed_pair(tmp_path):
    proc = run_cli("render", "--all", "--serving-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    for name in ("models.config", "models.cpu.config"):
        assert load_model_server_config(tmp_path / name) == load_model_server_config(SERVING / name)


def test_render_takes_the_newest_exported_version(tmp_path, model_repo):
    repo = tmp_path / "models"
    shutil.copytree(model_repo / "digits" / "1", repo / "digits" / "3")
    config = render_model_server_config([m for m in ZOO if m.name == "digits"], models_dir=repo)
    entry = config.model_config_list.config[0]
    assert list(entry.model_version_policy.specific.versions) == [3]
    assert dict(entry.version_labels) == {"stable": 3, "canary": 3}


def test_remapping_a_base_path_outside_the_mount_is_an_error():
    config = render_model_server_config(ZOO)
    with pytest.raises(ValueError, match="under none of"):
        remap_base_paths(config, {"/elsewhere": "/tmp"})


def test_check_serving_dir_reports_a_missing_file(serving_copy):
    (serving_copy / "monitoring.config").unlink()
    assert any(p.startswith("monitoring.config:") for p in check_serving_dir(serving_copy))
