"""`python -m exporter validate` passes a good export and names every tampering."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from exporter import warmup
from exporter.validate import ValidationError, validate
from tests.support.exporter import run_cli


def test_validate_passes_a_fresh_export_and_reports_measures(model_repo):
    report = validate(model_repo / "digits" / "1")
    assert report.problems == [] and report.variant == "fp32"
    assert report.golden["serving_default"] == {"max_abs_error": 0.0, "top1_agreement": 1.0}
    assert report.warmup_records == 2 * len(report.warmup_batch_sizes)


def test_validate_accepts_a_model_directory_and_checks_its_latest_version(model_repo):
    report = validate(model_repo / "ranker")
    assert report.path.name == "1" and report.signatures == ["regression", "serving_default"]


def test_validate_cli_fails_on_a_tampered_golden_output(model_repo_copy):
    version_dir = model_repo_copy / "digits" / "1"
    npz_path = version_dir / "manifest.npz"
    with np.load(npz_path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["serving_default/outputs/probabilities"] = arrays["serving_default/outputs/probabilities"].copy()
    arrays["serving_default/outputs/probabilities"][3, 7] += 0.25
    np.savez(npz_path, **arrays)

    result = run_cli(["validate", str(version_dir)])
    assert result.returncode == 1
    assert "golden 'serving_default'" in result.stderr
    assert "output 'probabilities': 1 of 320 values differ" in result.stderr and "[3, 7]" in result.stderr


def test_validate_fails_when_the_manifest_claims_a_different_signature(model_repo_copy):
    version_dir = model_repo_copy / "digits" / "1"
    doc = json.loads((version_dir / "manifest.json").read_text())
    doc["signatures"]["serving_default"]["inputs"]["images"]["shape"] = [-1, 28, 28, 1]
    (version_dir / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(ValidationError) as caught:
        validate(version_dir)
    assert any("signature 'serving_default' inputs['images']: saved model has DT_FLOAT [-1, 8, 8, 1], "
               "manifest says DT_FLOAT [-1, 28, 28, 1]" in p for p in caught.value.problems)


def test_validate_fails_when_the_saved_model_is_another_models(model_repo_copy):
    digits, text = model_repo_copy / "digits" / "1", model_repo_copy / "text" / "1"
    for part in ("saved_model.pb", "variables"):
        target = digits / part
        shutil.rmtree(target) if target.is_dir() else target.unlink()
        (shutil.copytree if (text / part).is_dir() else shutil.copy2)(text / part, target)
    with pytest.raises(ValidationError) as caught:
        validate(digits)
    message = str(caught.value)
    assert "signatures are ['classification', 'serving_default'], manifest says ['logits', 'serving_default']" in message
    assert "golden data for signature 'logits', which the saved model lacks" in message


def test_validate_fails_on_a_warmup_request_with_the_wrong_dtype(model_repo_copy):
    version_dir = model_repo_copy / "digits" / "1"
    images = np.zeros((2, 8, 8, 1), np.float64)
    logs = warmup.build_requests("digits", {"serving_default": {"images": images}}, [2])
    warmup.write_warmup(version_dir, logs)
    with pytest.raises(ValidationError) as caught:
        validate(version_dir)
    assert any("warmup record 0 (serving_default) input 'images' is DT_DOUBLE [2, 8, 8, 1], "
               "signature wants DT_FLOAT [-1, 8, 8, 1]" in p for p in caught.value.problems)
    assert any("warmup covers batch sizes [2]" in p for p in caught.value.problems)


def test_validate_names_a_manifest_whose_warmup_batch_sizes_are_not_a_list_of_sizes(model_repo_copy):
    version_dir = model_repo_copy / "digits" / "1"
    doc = json.loads((version_dir / "manifest.json").read_text())
    doc["warmup"]["batch_sizes"] = "1,2"
    (version_dir / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(ValidationError) as caught:
        validate(version_dir)
    assert caught.value.problems == ["manifest warmup batch_sizes is '1,2', not a list of batch sizes"]
