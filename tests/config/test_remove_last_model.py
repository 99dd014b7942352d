"""`serving.config remove` of the last model says what that does to the stack, and needs --force."""
from __future__ import annotations

from serving.config import load_model_server_config
from serving.config.cli import main as config_main
from tests.support.config import embedded_stack, user_model


def test_removing_the_last_model_is_refused_without_force_naming_the_health_check(tmp_path, capsys):
    repo = tmp_path / "repo"
    user_model(repo, "only")
    work = embedded_stack(tmp_path, repo)
    before = (work / "models.config").read_text()
    assert config_main(["remove", "only", "--work-dir", str(work)]) == 1
    err = capsys.readouterr().err
    assert "only is the last model served" in err and "health check" in err and "--force" in err
    assert (work / "models.config").read_text() == before


def test_with_force_it_is_removed_with_a_warning(tmp_path, capsys):
    repo = tmp_path / "repo"
    user_model(repo, "only")
    work = embedded_stack(tmp_path, repo)
    assert config_main(["remove", "only", "--work-dir", str(work), "--force"]) == 0
    assert "warning: removing the last model, only" in capsys.readouterr().err
    assert list(load_model_server_config(work / "models.config").model_config_list.config) == []


def test_removing_one_of_two_needs_no_force(tmp_path):
    repo = tmp_path / "repo"
    user_model(repo, "one")
    user_model(repo, "two")
    work = embedded_stack(tmp_path, repo)
    assert config_main(["remove", "one", "--work-dir", str(work)]) == 0
