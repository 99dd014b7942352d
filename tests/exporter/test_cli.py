"""The CLI and the package surface."""
from __future__ import annotations

import importlib
import pkgutil

import exporter
from exporter.manifest import load_manifest
from tests.support.exporter import run_cli


def test_ensure_skips_models_that_already_have_a_version(model_repo_copy):
    before = sorted(p.relative_to(model_repo_copy) for p in model_repo_copy.rglob("*"))
    result = run_cli(["ensure", "--model-repo", str(model_repo_copy), "--quiet", "digits", "text"])
    assert result.returncode == 0, result.stderr
    assert "digits: already has a version" in result.stdout and "text: already has a version" in result.stdout
    assert sorted(p.relative_to(model_repo_copy) for p in model_repo_copy.rglob("*")) == before


def test_export_refuses_an_existing_version_before_training(model_repo_copy):
    result = run_cli(["export", "--model", "digits", "--version", "1", "--model-repo", str(model_repo_copy)])
    assert result.returncode == 1
    assert "version 1 already exists" in result.stderr and "Epoch" not in result.stdout


def test_every_exporter_module_declares_an_explicit_all_of_existing_names():
    names = ["exporter"] + [m.name for m in pkgutil.walk_packages(exporter.__path__, "exporter.")
                            if m.name != "exporter.__main__"]
    for name in names:
        module = importlib.import_module(name)
        assert isinstance(module.__all__, list), name
        assert all(hasattr(module, attr) for attr in module.__all__), name


def test_export_from_module_factory_with_variants_then_inspect(tmp_path):
    out = tmp_path / "models"
    result = run_cli(["export", "--from", "tests.support.user_models:two_inputs", "--name", "duo",
                      "--variant", "xla", "--variant", "fp32", "--atol", "1e-4", "--model-repo", str(out),
                      "--quiet"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(out / "duo" / "1"), str(out / "duo_xla" / "1")]
    manifest = load_manifest(out / "duo_xla" / "1")
    assert manifest.tolerance["atol"] == 1e-4 and manifest.source.startswith("Keras model 'two_inputs'")


def test_zoo_only_flags_are_refused_with_a_zoo_model(capsys):
    from exporter.__main__ import main

    assert main(["export", "--model", "digits", "--samples", "x.npz"]) == 1
    assert "--samples only apply to --from" in capsys.readouterr().err


def test_from_needs_a_name(capsys):
    from exporter.__main__ import main

    assert main(["export", "--from", "tests.support.user_models:sequential"]) == 1
    assert "--from needs --name NAME" in capsys.readouterr().err
