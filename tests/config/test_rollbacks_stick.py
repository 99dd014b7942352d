"""Rollbacks that stick: a rolled-back version is never served again as stable by a config writer that picks
the version itself (config add, render, make up's reconcile on a fresh work dir), unless asked for by number.

No server answers here: the rollout and config commands write the served config for the next start, which
is what a restart or a fresh `make up` reads. tests/config/test_config_races.py moves labels on a live server.
"""
from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from serving.config import load_model_server_config
from serving.config.cli import main as config_main
from serving.config.models import render_repository_config
from serving.config.rollbacks import ROLLED_BACK_FILE, record_rollback, reinstate, rolled_back_versions, stable_version
from serving.config.served_config import STATE_FILE, StackState, write_state
from serving.rollout.cli import main as rollout_main
from serving.stack.prepared_configs import prepare_served_config
from tests.support.config import embedded_stack, user_model
from tests.support.servers import EmbeddedServer


def entry_of(config: Path, name: str):
    return next(e for e in load_model_server_config(config).model_config_list.config if e.name == name)


def served(config: Path, name: str) -> tuple[list[int], dict[str, int]]:
    entry = entry_of(config, name)
    return list(entry.model_version_policy.specific.versions), dict(entry.version_labels)


@pytest.fixture
def rolled_back(tmp_path: Path):
    """A stack serving m at version 1 with version 2 on disk, then `rollout canary m 2` and `rollout rollback m`."""
    repo = tmp_path / "repo"
    user_model(repo, "m", versions=(1,))
    work = embedded_stack(tmp_path, repo)
    user_model(repo, "m_v2_tmp", versions=(2,))
    (repo / "m_v2_tmp" / "2").rename(repo / "m" / "2")
    (repo / "m_v2_tmp").rmdir()
    args = ["--work-dir", str(work), "--timeout", "30"]
    assert rollout_main(["canary", "m", "2", *args]) == 0
    assert served(work / "models.config", "m") == ([1, 2], {"stable": 1, "canary": 2})
    assert rollout_main(["rollback", "m", *args]) == 0
    return {"repo": repo, "work": work, "config": work / "models.config", "tmp": tmp_path}


def test_rollback_marks_the_canarys_version_in_the_model_directory(rolled_back):
    assert served(rolled_back["config"], "m") == ([1], {"stable": 1, "canary": 1})
    assert list(rolled_back_versions(rolled_back["repo"] / "m")) == [2]
    assert stable_version(rolled_back["repo"] / "m") == 1
    assert (rolled_back["repo"] / "m" / ROLLED_BACK_FILE).is_file()


def test_a_fresh_make_up_and_render_do_not_serve_the_rolled_back_version(rolled_back):
    """Before: make up's reconcile on a fresh work dir served the newest version, the rolled-back 2."""
    fresh = rolled_back["tmp"] / "fresh-work" / "models.config"
    config = prepare_served_config(fresh, rolled_back["repo"], log=lambda _: None)
    assert config is not None and served(fresh, "m") == ([1], {"stable": 1, "canary": 1})
    entry = render_repository_config(rolled_back["repo"]).model_config_list.config[0]
    assert list(entry.model_version_policy.specific.versions) == [1]


def test_config_add_serves_the_newest_version_not_rolled_back(rolled_back, tmp_path):
    work = str(rolled_back["work"])
    assert config_main(["remove", "m", "--work-dir", work, "--force"]) == 0
    assert config_main(["add", "m", "--base-path", str(rolled_back["repo"] / "m"), "--work-dir", work]) == 0
    assert served(rolled_back["config"], "m") == ([1], {"stable": 1, "canary": 1})


def test_a_latest_policy_that_would_serve_it_is_refused(rolled_back, capsys):
    work = str(rolled_back["work"])
    assert config_main(["remove", "m", "--work-dir", work, "--force"]) == 0
    code = config_main(["add", "m", "--base-path", str(rolled_back["repo"] / "m"), "--work-dir", work,
                        "--policy", "latest:1"])
    assert code == 1
    assert "would serve version(s) [2], which were rolled back" in capsys.readouterr().err


def test_asking_for_it_by_number_serves_it_and_clears_its_mark(rolled_back, capsys):
    work = str(rolled_back["work"])
    assert config_main(["remove", "m", "--work-dir", work, "--force"]) == 0
    assert config_main(["add", "m", "--base-path", str(rolled_back["repo"] / "m"), "--work-dir", work,
                        "--version", "2"]) == 0
    assert served(rolled_back["config"], "m") == ([2], {"stable": 2, "canary": 2})
    assert "version 2 had been rolled back" in capsys.readouterr().out
    assert rolled_back_versions(rolled_back["repo"] / "m") == {}


def test_a_canary_on_it_keeps_the_mark_until_it_is_promoted(rolled_back):
    args = ["--work-dir", str(rolled_back["work"]), "--timeout", "30"]
    assert rollout_main(["canary", "m", "2", *args]) == 0
    assert list(rolled_back_versions(rolled_back["repo"] / "m")) == [2]
    assert rollout_main(["promote", "m", *args]) == 0
    assert served(rolled_back["config"], "m") == ([2], {"stable": 2, "canary": 2})
    assert rolled_back_versions(rolled_back["repo"] / "m") == {}


def test_every_version_rolled_back_is_refused_naming_version_n(tmp_path, capsys):
    repo = tmp_path / "repo"
    user_model(repo, "first")
    model = user_model(tmp_path / "elsewhere", "m", versions=(1,))
    record_rollback(model, 1, by="test")
    work = embedded_stack(tmp_path, repo)
    assert config_main(["add", "m", "--base-path", str(model), "--work-dir", str(work)]) == 1
    assert "name the one to serve with --version N" in capsys.readouterr().err
    assert reinstate(model, 1) and stable_version(model) == 1


@pytest.mark.slow
def test_a_version_rolled_back_on_a_live_server_is_not_served_after_a_restart_or_a_fresh_stack(model_repo, tmp_path):
    """The rollback's pushes reach a real embedded server; a restart from the served config and a server started
    from a fresh make-up render both serve version 1 only, with version 2 still on disk."""
    repo = tmp_path / "repo"
    (repo / "m").mkdir(parents=True)
    for version in (1, 2):
        (repo / "m" / str(version)).symlink_to(model_repo / "ranker" / "1", target_is_directory=True)
    work = tmp_path / "work"
    work.mkdir()
    config = work / "models.config"
    (repo / "m" / "2").rename(tmp_path / "v2")  # a fresh stack serves 1, then 2 is published
    prepare_served_config(config, repo, log=lambda _: None)
    (tmp_path / "v2").rename(repo / "m" / "2")
    flags = [f"--model_config_file={config}", "--allow_version_labels_for_unavailable_models=true"]
    with EmbeddedServer(flags, wait_for=["m"], timeout=240) as server:
        write_state(StackState("embedded", config, server.grpc_target, server.rest_url, repo), work / STATE_FILE)
        args = ["--work-dir", str(work), "--timeout", "120"]
        assert rollout_main(["canary", "m", "2", *args]) == 0
        assert rollout_main(["rollback", "m", *args]) == 0
    fresh = tmp_path / "fresh" / "models.config"
    prepare_served_config(fresh, repo, log=lambda _: None)
    for served_config_file in (config, fresh):
        with EmbeddedServer([f"--model_config_file={served_config_file}",
                             "--allow_version_labels_for_unavailable_models=true"], wait_for=["m"],
                            timeout=240) as server:
            states = httpx.get(f"{server.rest_url}/v1/models/m", timeout=30).json()["model_version_status"]
            assert [(s["version"], s["state"]) for s in states] == [("1", "AVAILABLE")], served_config_file
