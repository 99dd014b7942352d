"""What `make up` (embedded) serves: the persistent config made from the model repository, and which zoo
models it exports (no server started)."""
from __future__ import annotations

import pytest

from serving.config import load_model_server_config
from serving.config.edit import VersionPolicy, find_entry
from serving.config.models import write_model_server_config
from serving.model_repo import ZOO
from serving.stack.embedded import DEFAULT_EXPORTS, export_order, zoo_selection
from serving.stack.prepared_configs import prepare_served_config
from tests.support.config import user_model


def served(path):
    return {e.name: e for e in load_model_server_config(path).model_config_list.config}


def test_the_default_exports_are_small_zoo_models_and_big_ones_come_last():
    assert set(DEFAULT_EXPORTS) <= {m.name for m in ZOO if not m.gpu_only}
    assert export_order(["resnet50_xla", "digits_xla", "ranker", "resnet50", "digits"]) == [
        "digits", "ranker", "resnet50", "digits_xla", "resnet50_xla"]


def test_models_selects_zoo_models_the_cpu_can_serve():
    assert zoo_selection(None) == []
    assert zoo_selection("digits, resnet50") == ["digits", "resnet50"]
    assert "resnet50_xla" in zoo_selection("all") and "resnet50_trt_fp16" not in zoo_selection("all")
    with pytest.raises(ValueError, match="resnet50_trt_fp16, my_mlp"):
        zoo_selection("resnet50_trt_fp16,my_mlp")


def test_the_first_start_serves_every_model_directory_with_a_version(tmp_path):
    repo = tmp_path / "models"
    user_model(repo, "my_mlp", versions=(1, 3))
    user_model(repo, "digits")
    (repo / "not_a_model").mkdir()
    (repo / "README.md").write_text("")
    config_file = tmp_path / "work" / "models.config"
    prepare_served_config(config_file, repo, log=lambda _: None)
    entries = served(config_file)
    assert list(entries) == ["digits", "my_mlp"]
    assert entries["my_mlp"].base_path == str(repo / "my_mlp")
    assert VersionPolicy.of(entries["my_mlp"]) == VersionPolicy("specific", versions=(3,))
    assert dict(entries["my_mlp"].version_labels) == {"stable": 3, "canary": 3}


def test_later_starts_keep_the_config_add_new_models_but_not_removed_ones_and_drop_vanished_ones(tmp_path):
    repo = tmp_path / "models"
    user_model(repo, "a", versions=(1, 2))
    user_model(repo, "gone")
    config_file = tmp_path / "models.config"
    config = prepare_served_config(config_file, repo, log=lambda _: None)
    find_entry(config, "a").version_labels["canary"] = 1  # a rollout's state: canary on 1, stable on 2
    find_entry(config, "a").model_version_policy.specific.versions[:] = [1, 2]
    write_model_server_config(config, config_file)
    user_model(repo, "new")
    user_model(repo, "removed")
    for path in sorted((repo / "gone").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    lines: list[str] = []
    prepare_served_config(config_file, repo, removed=("removed",), log=lines.append)
    entries = served(config_file)
    assert list(entries) == ["a", "new"]
    assert dict(entries["a"].version_labels) == {"stable": 2, "canary": 1}
    assert list(entries["a"].model_version_policy.specific.versions) == [1, 2]
    assert any("gone: no version under" in line for line in lines)
    assert any("new: found in the model repository" in line for line in lines)
    before = config_file.read_text()
    prepare_served_config(config_file, repo, removed=("removed",), log=lines.append)
    assert config_file.read_text() == before  # nothing changed, nothing rewritten


def test_a_configured_version_that_is_not_on_disk_stops_the_start_with_the_fix(tmp_path):
    repo = tmp_path / "models"
    user_model(repo, "a", versions=(1,))
    config_file = tmp_path / "models.config"
    prepare_served_config(config_file, repo, log=lambda _: None)
    config_file.write_text(config_file.read_text().replace("value: 1", "value: 2").replace("versions: 1", "versions: 2"))
    lines: list[str] = []
    assert prepare_served_config(config_file, repo, log=lines.append) is None
    assert any(f"a: version 2 is configured but {repo / 'a'}/2 does not exist" in line for line in lines)
    assert "serving.config remove NAME" in lines[-1]
