"""`python -m exporter inspect` and `validate` on the exporter's versions and on foreign SavedModels."""
from __future__ import annotations

import json

import pytest

import exporter
from exporter.__main__ import main
from exporter.inspection import inspect_saved_model
from tests.support import user_models


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("models")
    return exporter.export(user_models.two_inputs(), name="duo", out=out, progress=False)["fp32"]


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    """A SavedModel the exporter did not write: Keras' model.export()."""
    path = tmp_path_factory.mktemp("foreign") / "saved"
    user_models.sequential().export(str(path), verbose=False)
    return path


def test_inspect_shows_signatures_like_saved_model_cli_plus_warmup_and_manifest(exported, capsys):
    assert main(["inspect", str(exported.parent)]) == 0   # a model directory: its latest version
    text = capsys.readouterr().out
    assert "MetaGraphDef with tag-set: 'serve' contains the following SignatureDefs:" in text
    assert ("signature_def['serving_default']:\n"
            "  The given SavedModel SignatureDef contains the following input(s):\n"
            "    inputs['features'] tensor_info:\n"
            "        dtype: DT_FLOAT\n"
            "        shape: (-1, 3)\n"
            "        name: serving_default_features:0\n") in text
    assert "    inputs['ids'] tensor_info:\n        dtype: DT_INT64\n        shape: (-1)\n" in text
    assert "outputs['score'] tensor_info:" in text and "Method name is: tensorflow/serving/predict" in text
    assert "Warmup: assets.extra/tf_serving_warmup_requests:" in text and "records; batch sizes 1, " in text
    assert "Manifest: duo (served as duo), variant fp32, version 1" in text
    assert "goldens: synthetic; serving_default 8 rows" in text


def test_inspect_json_describes_a_foreign_saved_model_without_warmup_or_manifest(foreign, capsys):
    assert main(["inspect", str(foreign), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["warmup"] is None and info["manifest"] is None
    [meta_graph] = info["meta_graphs"]
    assert meta_graph["tags"] == ["serve"] and set(meta_graph["signatures"]) == {"serve", "serving_default"}
    x = meta_graph["signatures"]["serving_default"]["inputs"]["x"]
    assert (x["dtype"], x["shape"]) == ("DT_FLOAT", [-1, 4])
    assert inspect_saved_model(foreign) == info


def test_inspect_text_of_a_foreign_saved_model_says_it_has_no_manifest(foreign, capsys):
    assert main(["inspect", str(foreign)]) == 0
    text = capsys.readouterr().out
    assert "signature_def['serve']:" in text and "Manifest: none" in text and "Warmup: none" in text


def test_validate_runs_a_foreign_saved_model_in_a_session_on_synthetic_inputs(foreign, capsys):
    assert main(["validate", str(foreign)]) == 0
    out = capsys.readouterr().out
    assert "(no manifest; synthetic inputs in a TF1 Session)" in out
    assert "ran serving_default: output_0 [2, 3]" in out and "ran serve: output_0 [2, 3]" in out


def test_validate_of_an_exported_user_model_replays_its_goldens_in_a_session(exported, capsys):
    assert main(["validate", str(exported)]) == 0
    assert "golden serving_default (TF1 Session): max abs error 0" in capsys.readouterr().out


def test_validate_asks_for_shape_where_a_foreign_model_leaves_a_dimension_unknown(tmp_path, capsys):
    user_models.unknown_dimension().export(str(tmp_path / "saved"), verbose=False)
    assert main(["validate", str(tmp_path / "saved")]) == 1
    assert "give its dimensions after the batch with --shape tokens:d1,d2" in capsys.readouterr().err
    assert main(["validate", str(tmp_path / "saved"), "--shape", "tokens:5"]) == 0
    assert "ran serving_default: output_0 [2, 4]" in capsys.readouterr().out


def test_inspect_and_validate_refuse_a_directory_without_a_saved_model(tmp_path, capsys):
    assert main(["inspect", str(tmp_path)]) == 1
    assert "holds no saved_model.pb" in capsys.readouterr().err
    assert main(["validate", str(tmp_path)]) == 1
