"""The config the stack serves (``serving.config.served_config``) and ``serving.config add|remove|render`` on it,
with no server running: resolution from make up's state file, path and label checks before anything is
written, atomic writes that keep the compose pair in sync."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from serving.checkout import REPO_ROOT
from serving.config import load_model_server_config
from serving.config.cli import check_serving_dir
from serving.config.edit import VersionPolicy, add_steps, entry_problems, model_entry, parse_labels, remove_steps
from serving.config.models import render_repository_config
from serving.config.served_config import (
    COMPOSE_PAIR,
    DEFAULT_GRPC,
    STATE_FILE,
    ServedConfig,
    StackState,
    read_state,
    served_config,
    write_state,
)
from tests.support.config import Listener, embedded_stack, run_cli, user_model

SERVING = REPO_ROOT / "serving"


def test_without_a_state_file_the_compose_file_is_served_with_models_mapped_to_the_repository(tmp_path):
    served = served_config(work_dir=tmp_path)
    assert served.path == SERVING / "models.config" and served.grpc == DEFAULT_GRPC
    assert served.host_path("/models/digits") == REPO_ROOT / "models" / "digits"
    assert served.base_path_for(REPO_ROOT / "models" / "mine") == "/models/mine"
    with pytest.raises(ValueError, match="outside what the server of models.config sees"):
        served.base_path_for(tmp_path / "mine")


def test_with_a_state_file_the_stacks_config_and_server_are_the_defaults(tmp_path):
    repo = tmp_path / "repo"
    user_model(repo, "mine")
    work = embedded_stack(tmp_path, repo, grpc="127.0.0.1:9")
    served = served_config(work_dir=work)
    assert (served.path, served.grpc, dict(served.mounts)) == (work / "models.config", "127.0.0.1:9", {})
    assert served.state_file == work / STATE_FILE
    # The compose file pushed to the embedded stack's server: /models/... is read as a host path there.
    compose = served_config(SERVING / "models.config", work_dir=work)
    assert compose.grpc == "127.0.0.1:9" and compose.host_path("/models/digits") == Path("/models/digits")
    assert any("no version directory under /models/digits" in p for p in compose.problems(compose.load()))
    # ... but read through the /models mount for another server (a compose TF Serving).
    other = served_config(SERVING / "models.config", grpc="127.0.0.1:8500", model_repo=repo, work_dir=work)
    assert other.host_path("/models/mine") == repo / "mine"


def test_state_round_trips_and_a_broken_file_reads_as_no_state(tmp_path):
    state = StackState("compose-cpu", tmp_path / "m.config", "h:1", "http://h:2", tmp_path / "models",
                       {"/models": tmp_path / "models"}, removed=("a",), exporting=("b",), pid=7)
    write_state(state, tmp_path / STATE_FILE)
    assert read_state(tmp_path / STATE_FILE) == state
    (tmp_path / STATE_FILE).write_text("{not json")
    assert read_state(tmp_path / STATE_FILE) is None
    assert read_state(tmp_path / "missing.json") is None


def test_writing_one_compose_file_rewrites_its_pair_and_keeps_headers(tmp_path):
    for name in COMPOSE_PAIR:
        shutil.copy(SERVING / name, tmp_path / name)
    headers = {name: (tmp_path / name).read_text().split("model_config_list")[0] for name in COMPOSE_PAIR}
    served = served_config(tmp_path / "models.cpu.config", grpc="127.0.0.1:1", work_dir=tmp_path)
    served.write(add_steps(served.load(), model_entry("mine", "/models/mine", VersionPolicy("specific", versions=(1,)),
                                                      {"stable": 1}), [1])[-1].config)
    gpu = [e.name for e in load_model_server_config(tmp_path / "models.config").model_config_list.config]
    assert gpu[-1] == "mine" and "resnet50_trt_fp16" in gpu  # the GPU-only model stays in the GPU file
    for name in COMPOSE_PAIR:
        assert (tmp_path / name).read_text().startswith(headers[name])
    assert not list(tmp_path.glob(".*.tmp"))  # written through a temp file renamed over the target


@pytest.mark.parametrize("text, policy", [
    ("latest", VersionPolicy("latest", 1)), ("latest:3", VersionPolicy("latest", 3)), ("all", VersionPolicy("all")),
    ("versions:2,1,2", VersionPolicy("specific", versions=(1, 2))),
])
def test_version_policies_parse_like_tf_servings(text, policy):
    assert VersionPolicy.parse(text) == policy
    entry = model_entry("m", "/m", policy)
    assert VersionPolicy.of(entry) == policy


@pytest.mark.parametrize("text", ["latest:0", "latest:x", "newest", "versions:", "all:2", "versions:a"])
def test_a_bad_version_policy_is_refused(text):
    with pytest.raises(ValueError, match="invalid version policy"):
        VersionPolicy.parse(text)


def test_policies_serve_what_is_on_disk():
    assert VersionPolicy("latest", 2).served([1, 3, 2]) == [2, 3]
    assert VersionPolicy("all").served([3, 1]) == [1, 3]
    assert VersionPolicy("specific", versions=(4,)).served([1]) == [4]


def test_labels_are_name_equals_version():
    assert parse_labels(["stable=1", "canary=2"]) == {"stable": 1, "canary": 2}
    with pytest.raises(ValueError, match="invalid label 'stable'"):
        parse_labels(["stable"])


def test_entry_problems_follow_tf_servings_rules():
    entry = model_entry("m", "/m", VersionPolicy("specific", versions=(1, 3)), {"stable": 1, "can-ary": 3, "old": 2})
    assert entry_problems(entry, [], "/m") == [
        "m: no version directory under /m; TF Serving would wait for one, and hold every later config reload, "
        "until it restarts"]
    assert entry_problems(entry, [1, 2], "/m") == [
        "m: version 3 is configured but /m/3 does not exist",
        "m: invalid version label 'can-ary': labels must match [a-zA-Z0-9_]+",
        "m: label old -> 2 is not a version the policy serves ([1, 3]); TF Serving assigns labels only to "
        "AVAILABLE versions"]


def test_adding_loads_before_labelling_and_removing_is_one_step():
    config = render_repository_config(Path("/nonexistent"))
    entry = model_entry("m", "/m", VersionPolicy("latest", 2), {"stable": 3})
    load, label = add_steps(config, entry, [1, 2, 3])
    assert (load.wait_for, label.wait_for) == ((2, 3), (2, 3))
    assert [dict(e.version_labels) for e in load.config.model_config_list.config] == [{}]
    assert [dict(e.version_labels) for e in label.config.model_config_list.config] == [{"stable": 3}]
    (remove,) = remove_steps(label.config, "m")
    assert list(remove.config.model_config_list.config) == [] and remove.config.HasField("model_config_list")
    with pytest.raises(ValueError, match="already in the config"):
        add_steps(label.config, entry, [1, 2, 3])


def test_add_and_remove_without_a_server_write_the_compose_pair_that_check_then_passes(tmp_path):
    serving = tmp_path / "serving"
    serving.mkdir()
    for path in SERVING.glob("*.config"):
        shutil.copy(path, serving)
    repo = tmp_path / "models"
    user_model(repo, "my_mlp", versions=(1, 2))
    proc = run_cli("add", "my_mlp", "--base-path", str(repo / "my_mlp"), "--config-file", str(serving / "models.config"),
                   "--model-repo", str(repo), "--grpc", "127.0.0.1:1", "--work-dir", str(tmp_path / "work"))
    assert proc.returncode == 0, proc.stderr
    assert "no server answers at 127.0.0.1:1: the stack serves it from its next start" in proc.stdout
    for name in COMPOSE_PAIR:
        entry = {e.name: e for e in load_model_server_config(serving / name).model_config_list.config}["my_mlp"]
        assert entry.base_path == "/models/my_mlp"
        assert list(entry.model_version_policy.specific.versions) == [2]
        assert dict(entry.version_labels) == {"stable": 2, "canary": 2}
    problems = check_serving_dir(serving, models_dir=repo)
    assert problems and [p for p in problems if "my_mlp" in p or "models.cpu.config" in p] == []  # only zoo exports
    proc = run_cli("remove", "my_mlp", "--config-file", str(serving / "models.config"), "--grpc", "127.0.0.1:1",
                   "--work-dir", str(tmp_path / "work"))
    assert proc.returncode == 0, proc.stderr
    for name in COMPOSE_PAIR:
        assert load_model_server_config(serving / name) == load_model_server_config(SERVING / name)


def test_add_refuses_a_base_path_without_versions_and_bad_labels_before_writing_or_calling(tmp_path):
    repo = tmp_path / "repo"
    user_model(repo, "mine", versions=(1,))
    (repo / "empty").mkdir()
    listener = Listener()
    work = embedded_stack(tmp_path, repo, grpc=listener.target)
    before = (work / "models.config").read_text()
    cases = [
        (["empty", "--base-path", str(repo / "empty")], f"empty: no version directory under {repo / 'empty'}"),
        (["mine2", "--base-path", str(repo / "mine"), "--label", "stable=2"],
         "mine2: version 2 is configured but"),
        (["mine2", "--base-path", str(repo / "mine"), "--label", "st-able=1"], "invalid version label 'st-able'"),
        (["mine2", "--base-path", str(repo / "mine"), "--policy", "latest:1", "--label", "stable=3"],
         "label stable -> 3 is not a version the policy serves ([1])"),
        (["mine", "--base-path", str(repo / "mine")], "model 'mine' is already in the config"),
    ]
    for args, message in cases:
        proc = run_cli("add", *args, "--work-dir", str(work))
        assert proc.returncode == 1 and message in proc.stderr, (args, proc.stderr)
        assert "unchanged" in proc.stderr
    assert (work / "models.config").read_text() == before
    assert listener.close() == 0  # refused before the server was contacted


def test_remove_and_render_work_on_the_stacks_config_and_removals_are_recorded(tmp_path):
    repo = tmp_path / "repo"
    for name in ("a", "b"):
        user_model(repo, name)
    work = embedded_stack(tmp_path, repo)
    proc = run_cli("remove", "a", "--work-dir", str(work))
    assert proc.returncode == 0, proc.stderr
    assert read_state(work / STATE_FILE).removed == ("a",)
    rendered = run_cli("render", "--work-dir", str(work))
    assert rendered.returncode == 0 and 'name: "b"' in rendered.stdout and 'name: "a"' not in rendered.stdout
    proc = run_cli("add", "a", "--base-path", str(repo / "a"), "--work-dir", str(work))
    assert proc.returncode == 0, proc.stderr
    assert read_state(work / STATE_FILE).removed == ()
    missing = run_cli("remove", "zzz", "--work-dir", str(work))
    assert missing.returncode == 1 and "model 'zzz' is not in the config (it has: b, a)" in missing.stderr


def test_check_of_one_served_config_reads_its_base_paths_on_this_host(tmp_path):
    repo = tmp_path / "repo"
    user_model(repo, "mine")
    work = embedded_stack(tmp_path, repo)
    ok = run_cli("check", "--config-file", str(work / "models.config"), "--work-dir", str(work))
    assert ok.returncode == 0, ok.stderr
    shutil.rmtree(repo / "mine" / "1")
    bad = run_cli("check", "--config-file", str(work / "models.config"), "--work-dir", str(work))
    assert bad.returncode == 1 and f"mine: no version directory under {repo / 'mine'}" in bad.stderr


def test_served_config_problems_map_compose_paths_through_the_mount(tmp_path):
    repo = tmp_path / "models"
    user_model(repo, "digits")
    served = ServedConfig(SERVING / "models.config", "127.0.0.1:1", {"/models": repo})
    config = load_model_server_config(SERVING / "models.config")
    assert served.problems(config, ["digits"]) == []
    assert served.problems(config, ["text"]) == [
        f"text: no version directory under {repo / 'text'} (base_path /models/text); TF Serving would wait for "
        "one, and hold every later config reload, until it restarts"]
