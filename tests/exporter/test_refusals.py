"""Models TF Serving could not serve as given are refused with a message that says how to fix them; nothing is published."""
from __future__ import annotations

import pytest

import exporter
from exporter.__main__ import main
from exporter.validate import ValidationError, validate
from tests.support import user_models
from tests.support.exporter import nothing_published


def test_an_unknown_dimension_after_the_batch_is_refused_naming_the_input_and_the_flag(tmp_path):
    out = tmp_path / "models"
    with pytest.raises(exporter.ExportError) as caught:
        exporter.export(user_models.unknown_dimension(), name="bag", out=out, progress=False)
    message = str(caught.value)
    assert "input 'tokens' has an unknown dimension after the batch ([batch,?])" in message
    assert "--input tokens:int32:d1" in message
    assert nothing_published(out)


@pytest.mark.parametrize("tolerance", [{"atol": 1e-3, "xla": {"atol": 2e-4}}, {"rtol": 1e-3, "atol": {"xla": 2e-4}}])
def test_a_tolerance_both_flat_and_by_variant_is_refused_before_any_model_is_read(tmp_path, tolerance):
    out = tmp_path / "models"
    with pytest.raises(ValueError, match=r"tolerance is either flat \(atol, rtol, min_top1\) or by variant name"):
        exporter.export(object(), name="m", out=out, variants=["fp32", "xla"], tolerance=tolerance, progress=False)
    assert nothing_published(out)


def _keras3_saved_model_save(path):
    import numpy as np
    import tensorflow as tf

    model = user_models.sequential()
    model.compile(optimizer="adam", loss="mse")
    model.fit(np.zeros((4, 4), np.float32), np.zeros((4, 3), np.float32), verbose=0)
    tf.saved_model.save(model, str(path))


def test_a_keras3_tf_saved_model_save_export_that_fails_in_a_session_is_refused_with_the_fix(tmp_path):
    _keras3_saved_model_save(tmp_path / "saved")
    out = tmp_path / "models"
    with pytest.raises(exporter.ExportError) as caught:
        exporter.export(tmp_path / "saved", name="broken", out=out, progress=False)
    message = str(caught.value)
    assert "fails in a TF1 Session like TF Serving's" in message and "Could not find variable" in message
    assert "model.export(path)" in message and "pass the Keras model itself to exporter.export" in message
    assert nothing_published(out)

    with pytest.raises(ValidationError) as caught:   # validate says the same of the directory itself
        validate(tmp_path / "saved")
    assert "Could not find variable" in str(caught.value) and "model.export(path)" in str(caught.value)


@pytest.mark.parametrize("make", ["missing", "empty_dir", "text_file"])
def test_a_path_that_is_not_a_model_is_refused(tmp_path, make):
    path = tmp_path / "thing"
    if make == "empty_dir":
        path.mkdir()
    elif make == "text_file":
        path.write_text("not a model")
    out = tmp_path / "models"
    with pytest.raises(exporter.ExportError, match=r"is not a model: .*Give a SavedModel directory"):
        exporter.export(path, name="thing", out=out, progress=False)
    assert nothing_published(out)


def test_a_model_with_no_signatures_is_refused(tmp_path):
    import tensorflow as tf

    out = tmp_path / "models"
    with pytest.raises(exporter.ExportError, match="has no signatures: give a tf.function an input_signature"):
        exporter.export(user_models.no_signatures(), name="empty", out=out, progress=False)
    tf.saved_model.save(user_models.no_signatures(), str(tmp_path / "saved"))
    with pytest.raises(exporter.ExportError, match="has no signatures"):
        exporter.export(tmp_path / "saved", name="empty", out=out, progress=False)
    assert nothing_published(out)


@pytest.mark.parametrize("case", ["not_a_model", "no_signatures", "unknown_dimension"])
def test_the_cli_refuses_with_exit_1_and_the_message_without_a_traceback(tmp_path, capsys, case):
    out = tmp_path / "models"
    source = {"not_a_model": str(tmp_path),
              "no_signatures": "tests.support.user_models:no_signatures",
              "unknown_dimension": "tests.support.user_models:unknown_dimension"}[case]
    assert main(["export", "--from", source, "--name", "m", "--model-repo", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert {"not_a_model": "is not a model", "no_signatures": "has no signatures",
            "unknown_dimension": "--input tokens:int32:d1"}[case] in err
    assert nothing_published(out)


def test_a_bad_input_flag_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["export", "--from", "x:y", "--name", "m", "--input", "tokens:int32"])
    assert caught.value.code == 2
    assert "expected NAME:DTYPE:SHAPE" in capsys.readouterr().err
