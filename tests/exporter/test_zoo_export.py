"""Every zoo model exports, reloads, and shows TF Serving the signatures it promises."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from exporter.manifest import load_manifest
from tests.support.exporter import SMALL_MODELS, cli_env
from tests.support.models import run_in_tf1_session

EXPECTED_SIGNATURES = {
    "digits": {"serving_default", "logits"},
    "text": {"serving_default", "classification"},
    "ranker": {"serving_default", "regression"},
    "resnet50": {"serving_default"},
}


def _saved_model_cli(version_dir) -> str:
    return subprocess.run([str(Path(sys.executable).parent / "saved_model_cli"), "show", "--all",
                           "--dir", str(version_dir)], capture_output=True, text=True, check=True,
                          env=cli_env(), timeout=180).stdout


def _cli_signatures(text: str) -> dict[str, list[str]]:
    """signature key → the shapes of its inputs, from `saved_model_cli show --all`."""
    found = {}
    for block in re.split(r"\nsignature_def\['", text)[1:]:
        key = block.split("'", 1)[0]
        inputs = block.split("contains the following output(s)")[0]
        found[key] = re.findall(r"shape: (\([^)]*\)|unknown_rank)", inputs)
    found.pop("__saved_model_init_op", None)
    return found


def _reload_and_run(version_dir):
    import tensorflow as tf

    manifest = load_manifest(version_dir)
    loaded = tf.saved_model.load(str(version_dir))
    for sig, golden in manifest.golden.items():
        outputs = loaded.signatures[sig](**{k: tf.constant(v) for k, v in golden.inputs.items()})
        for key, expected in golden.outputs.items():
            got = outputs[key].numpy()
            if expected.dtype.kind == "f":
                np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
            else:
                np.testing.assert_array_equal(got, expected)
    return loaded


@pytest.mark.parametrize("name", SMALL_MODELS)
def test_small_model_reloads_with_tf_saved_model_load_and_reproduces_golden_outputs(model_repo, name):
    loaded = _reload_and_run(model_repo / name / "1")
    assert set(loaded.signatures.keys()) == EXPECTED_SIGNATURES[name]


@pytest.mark.parametrize("name", SMALL_MODELS)
def test_saved_model_cli_lists_expected_signatures_with_batch_dimension_minus_one(model_repo, name):
    signatures = _cli_signatures(_saved_model_cli(model_repo / name / "1"))
    assert set(signatures) == EXPECTED_SIGNATURES[name]
    for key, shapes in signatures.items():
        assert shapes, f"{name}/{key} shows no inputs"
        assert all(s.startswith("(-1") for s in shapes), f"{name}/{key} input shapes {shapes}"


@pytest.mark.slow
def test_resnet50_exports_reloads_and_keeps_warmup_file_sane(resnet50_repo):
    version_dir = resnet50_repo / "resnet50" / "1"
    signatures = _cli_signatures(_saved_model_cli(version_dir))
    assert signatures == {"serving_default": ["(-1, 224, 224, 3)"]}
    _reload_and_run(version_dir)
    run_in_tf1_session(version_dir)
    manifest = load_manifest(version_dir)
    assert manifest.signatures["serving_default"].inputs["images"].dtype_name == "DT_FLOAT"
    warmup_bytes = (version_dir / "assets.extra" / "tf_serving_warmup_requests").stat().st_size
    assert warmup_bytes < 70 * 1024 * 1024
    assert 1 in manifest.warmup["batch_sizes"] and manifest.warmup["records"] >= 1


def test_digits_manifest_records_held_out_accuracy_of_at_least_095(model_repo):
    manifest = load_manifest(model_repo / "digits" / "1")
    assert manifest.accuracy is not None and manifest.accuracy >= 0.95
    assert manifest.metrics["held_out_examples"] >= 300


def test_digits_answers_real_held_out_images_correctly(model_repo):
    manifest = load_manifest(model_repo / "digits" / "1")
    predicted = manifest.golden_outputs()["classes"]
    assert np.mean(predicted == manifest.labels) >= 0.9
    images = manifest.golden_inputs()["images"]
    assert images.shape[1:] == (8, 8, 1) and images.dtype == np.float32 and images.max() <= 16


def test_text_model_tokenizes_raw_strings_inside_the_graph(model_repo):
    import tensorflow as tf

    loaded = tf.saved_model.load(str(model_repo / "text" / "1"))
    out = loaded.signatures["serving_default"](text=tf.constant(
        ["Heavy RAIN and snow in the forecast!", "The chef baked bread with cheese", ""]))
    assert list(out["label"].numpy()[:2]) == [b"weather", b"food"]
    assert np.all(np.isfinite(out["probabilities"].numpy()))  # the empty string is a valid input


def test_classification_signature_follows_tf_serving_classifier_rules(model_repo):
    sig = load_manifest(model_repo / "text" / "1").signatures["classification"]
    assert {k: (t.dtype_name, t.dims) for k, t in sig.inputs.items()} == {"inputs": ("DT_STRING", (-1,))}
    assert {k: (t.dtype_name, t.dims) for k, t in sig.outputs.items()} == {
        "classes": ("DT_STRING", (-1, 4)), "scores": ("DT_FLOAT", (-1, 4))}


def test_classification_signature_scores_serialized_examples_like_the_predict_signature(model_repo):
    manifest = load_manifest(model_repo / "text" / "1")
    scores = manifest.golden_outputs("classification")["scores"]
    probabilities = manifest.golden_outputs("serving_default")["probabilities"]
    np.testing.assert_allclose(scores, probabilities, rtol=1e-5, atol=1e-6)
    classes = manifest.golden_outputs("classification")["classes"]
    assert list(classes[0]) == [b"sports", b"weather", b"technology", b"food"]


def test_regression_signature_follows_tf_serving_regressor_rules(model_repo):
    manifest = load_manifest(model_repo / "ranker" / "1")
    sig = manifest.signatures["regression"]
    assert {k: (t.dtype_name, t.dims) for k, t in sig.inputs.items()} == {"inputs": ("DT_STRING", (-1,))}
    assert {k: (t.dtype_name, t.dims) for k, t in sig.outputs.items()} == {"outputs": ("DT_FLOAT", (-1,))}
    np.testing.assert_allclose(manifest.golden_outputs("regression")["outputs"],
                               manifest.golden_outputs()["probability"], rtol=1e-5, atol=1e-6)


def test_ranker_has_mixed_dtype_named_inputs_and_several_outputs(model_repo):
    sig = load_manifest(model_repo / "ranker" / "1").signatures["serving_default"]
    assert {k: t.dtype_name for k, t in sig.inputs.items()} == {
        "user_id": "DT_INT64", "item_id": "DT_INT64", "features": "DT_FLOAT"}
    assert set(sig.outputs) == {"score", "probability", "user_embedding"}


@pytest.mark.parametrize("name", SMALL_MODELS)
def test_manifest_records_tensorflow_version_variant_and_source_hash(model_repo, name):
    import tensorflow as tf

    from exporter.export import source_hash

    manifest = load_manifest(model_repo / name / "1")
    assert manifest.tensorflow_version == tf.__version__
    assert manifest.variant == "fp32" and manifest.published_name == name and manifest.version == 1
    assert manifest.source_hash == source_hash()


@pytest.mark.parametrize("name", SMALL_MODELS)
def test_small_model_restores_and_answers_in_a_tf1_session_like_tf_serving(model_repo, name):
    run_in_tf1_session(model_repo / name / "1")


@pytest.mark.parametrize("name", SMALL_MODELS)
def test_checkpoint_holds_only_the_weights_the_signatures_read(model_repo, name):
    import tensorflow as tf

    version_dir = model_repo / name / "1"
    loaded = tf.saved_model.load(str(version_dir))
    weights = sum(v.shape.num_elements() * v.dtype.size for v in loaded.serving_variables)
    stored = sum(p.stat().st_size for p in (version_dir / "variables").glob("variables.data-*"))
    assert weights <= stored <= weights * 1.05 + 4096  # no optimizer state, no duplicate copies
