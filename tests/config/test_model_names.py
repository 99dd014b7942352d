"""Model names: one rule (serving.config.names) held by `config add`, `config check` and the gateway's canary."""
from __future__ import annotations

import pytest

from gateway.canary import canary_route_files
from serving.config import load_model_server_config
from serving.config.cli import main as config_main
from serving.config.models import (
    check_model_server_config,
    new_model_server_config,
    served_entry,
    write_model_server_config,
)
from serving.config.names import MAX_MODEL_NAME_LENGTH, model_name_problem
from tests.support.config import embedded_stack, user_model

BAD = ["a/b", "..", "a..b", "a:b", 'a"b', "a'b", "a b", "a\nb", "a\tb", "-a", ".a", "", "x" * 300, "ü"]
GOOD = ["digits", "resnet50_xla", "my-model.v2", "A1", "x" * MAX_MODEL_NAME_LENGTH]


@pytest.mark.parametrize("name", BAD)
def test_a_name_outside_the_rule_is_refused_naming_the_rule(name):
    problem = model_name_problem(name)
    assert problem is not None and "a model name is 1 to 128 ASCII letters" in problem


@pytest.mark.parametrize("name", GOOD)
def test_names_of_the_rule_pass(name):
    assert model_name_problem(name) is None


@pytest.mark.parametrize("name", ["a/b", "a..b", "a:b", "a\nb", "x" * 300])
def test_config_add_refuses_the_name_before_writing(tmp_path, capsys, name):
    repo = tmp_path / "repo"
    user_model(repo, "first")
    base = user_model(tmp_path / "elsewhere", "m")
    work = embedded_stack(tmp_path, repo)
    before = (work / "models.config").read_text()
    assert config_main(["add", name, "--base-path", str(base), "--work-dir", str(work)]) == 1
    assert "a model name is 1 to 128 ASCII letters" in capsys.readouterr().err
    assert (work / "models.config").read_text() == before


@pytest.mark.parametrize("name", ["a/b", "a..b", 'a"b', "a b", "x" * 300])
def test_config_check_fails_on_the_name(tmp_path, capsys, name):
    config = new_model_server_config()
    served_entry(config, name, "/models/x", 1)
    assert any("a model name is" in p for p in check_model_server_config(config))
    path = tmp_path / "models.config"
    write_model_server_config(config, path)
    assert load_model_server_config(path).model_config_list.config[0].name == name  # TF Serving parses it
    assert config_main(["check", "--config-file", str(path), "--work-dir", str(tmp_path / "none")]) == 1
    assert "a model name is" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["a..b", "-a", "x" * 300])
def test_the_gateway_holds_names_to_the_same_rule(name):
    with pytest.raises(ValueError, match="a model name is"):
        canary_route_files(name, 10)
    assert canary_route_files("my-model.v2", 10)
