"""A user's own models export, validate, and answer in a TF1 Session like the model itself."""
from __future__ import annotations

import json

import numpy as np
import pytest

import exporter
from exporter.export import source_hash
from exporter.manifest import load_manifest
from exporter.validate import validate
from exporter.warmup import allowed_batch_sizes
from tests.support import user_models
from tests.support.exporter import session_predict

RNG = np.random.default_rng(7)


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_keras_sequential_exports_validates_and_answers_like_the_model(tmp_path):
    model = user_models.sequential()
    rows = RNG.normal(size=(6, 4)).astype(np.float32)
    paths = exporter.export(model, name="mlp", out=tmp_path, sample_inputs={"x": rows}, progress=False)
    assert paths == {"fp32": tmp_path / "mlp" / "1"}
    version_dir = paths["fp32"]

    report = validate(version_dir)
    assert report.problems == [] and report.golden["serving_default"]["max_abs_error"] < 1e-6
    fresh = RNG.normal(size=(3, 4)).astype(np.float32)
    _close(session_predict(version_dir, {"x": fresh})["output_0"], model(fresh).numpy())

    manifest = load_manifest(version_dir)
    assert manifest.golden_source == "user" and manifest.model == "mlp" and manifest.version == 1
    np.testing.assert_array_equal(manifest.golden_inputs()["x"], rows)
    assert manifest.signatures["serving_default"].inputs["x"].dims == (-1, 4)
    assert manifest.warmup["batch_sizes"] == list(allowed_batch_sizes())
    assert manifest.source.startswith("Keras model 'mlp'")


def test_the_source_hash_covers_the_users_model_not_only_the_exporter(tmp_path):
    first, second = user_models.sequential(), user_models.sequential()
    second.layers[-1].bias.assign(np.ones(3, np.float32))
    hashes = [load_manifest(exporter.export(m, name=n, out=tmp_path, progress=False)["fp32"]).source_hash
              for m, n in ((first, "a"), (user_models.sequential(), "b"), (second, "c"))]
    assert hashes[0] == hashes[1]          # the same model (same weights) hashes the same
    assert hashes[0] != hashes[2]          # other weights, another hash
    assert source_hash() not in hashes     # not the exporter's code alone


def test_functional_model_with_two_named_inputs_of_different_dtypes(tmp_path):
    model = user_models.two_inputs()
    version_dir = exporter.export(model, name="ranker2", out=tmp_path, progress=False)["fp32"]
    signature = load_manifest(version_dir).signatures["serving_default"]
    assert {k: (t.dtype_name, t.dims) for k, t in signature.inputs.items()} == {
        "features": ("DT_FLOAT", (-1, 3)), "ids": ("DT_INT64", (-1,))}
    assert set(signature.outputs) == {"score", "embedding"}

    inputs = {"features": RNG.normal(size=(5, 3)).astype(np.float32), "ids": np.array([0, 3, 9, 9, 1], np.int64)}
    got, want = session_predict(version_dir, inputs), model(inputs)
    _close(got["score"], want["score"].numpy())
    _close(got["embedding"], want["embedding"].numpy())
    validate(version_dir)


def test_tf_module_with_a_string_input_and_a_lookup_table_gets_synthetic_goldens(tmp_path):
    module = user_models.string_module()
    version_dir = exporter.export(module, name="colors", out=tmp_path, progress=False)["fp32"]
    manifest = load_manifest(version_dir)
    assert manifest.signatures["serving_default"].inputs["text"].dtype_name == "DT_STRING"
    assert manifest.golden_source == "synthetic"
    assert any("synthetic" in note for note in manifest.notes)
    assert manifest.golden_inputs()["text"][0] == b"sample 0"

    text = np.array([b"green", b"", b"purple", b"red"], dtype=object)
    got, want = session_predict(version_dir, {"text": text}), module(text)
    np.testing.assert_array_equal(got["id"], want["id"].numpy())
    np.testing.assert_array_equal(got["id"], [1, -1, -1, 0])   # the table was saved with the model
    np.testing.assert_array_equal(got["length"], [5, 0, 6, 3])
    validate(version_dir)


def test_keras_model_built_for_batch_32_serves_any_batch_size(tmp_path):
    model = user_models.fixed_batch()
    version_dir = exporter.export(model, name="b32", out=tmp_path, progress=False)["fp32"]
    assert load_manifest(version_dir).signatures["serving_default"].inputs["x"].dims == (-1, 4)
    kernel, bias = (w.numpy() for w in model.layers[-1].weights)
    for batch in (1, 5):
        x = RNG.normal(size=(batch, 4)).astype(np.float32)
        _close(session_predict(version_dir, {"x": x})["output_0"], x @ kernel + bias)


def test_savedmodel_written_by_model_export_is_exported_with_its_signatures(tmp_path):
    model = user_models.sequential()
    model.export(str(tmp_path / "saved"), verbose=False)
    out = tmp_path / "models"
    version_dir = exporter.export(tmp_path / "saved", name="from_saved", out=out, progress=False)["fp32"]
    manifest = load_manifest(version_dir)
    assert set(manifest.signatures) == {"serve", "serving_default"}   # model.export() writes both
    assert manifest.source == f"SavedModel {tmp_path / 'saved'}"
    x = RNG.normal(size=(4, 4)).astype(np.float32)
    for signature in ("serve", "serving_default"):
        _close(session_predict(version_dir, {"x": x}, signature)["output_0"], model(x).numpy())
    validate(version_dir)

    only = exporter.export(tmp_path / "saved", name="one_sig", out=out, signatures=["serving_default"],
                           progress=False)["fp32"]
    assert set(load_manifest(only).signatures) == {"serving_default"}


def test_keras_file_is_exported(tmp_path):
    model = user_models.two_inputs()
    model.save(tmp_path / "model.keras")
    version_dir = exporter.export(tmp_path / "model.keras", name="from_file", out=tmp_path / "models",
                                  progress=False)["fp32"]
    inputs = {"features": RNG.normal(size=(2, 3)).astype(np.float32), "ids": np.array([4, 5], np.int64)}
    _close(session_predict(version_dir, inputs)["score"], model(inputs)["score"].numpy())


def test_input_flag_fixes_an_unknown_dimension(tmp_path):
    model = user_models.unknown_dimension()
    version_dir = exporter.export(model, name="bag", out=tmp_path, inputs=["tokens:int32:6"], progress=False)["fp32"]
    assert load_manifest(version_dir).signatures["serving_default"].inputs["tokens"].dims == (-1, 6)
    tokens = RNG.integers(0, 20, size=(3, 6)).astype(np.int32)
    _close(session_predict(version_dir, {"tokens": tokens})["output_0"], model(tokens).numpy())


def test_samples_from_npz_and_from_a_rest_body_become_the_goldens(tmp_path):
    model = user_models.two_inputs()
    features = RNG.normal(size=(3, 3)).astype(np.float32)
    np.savez(tmp_path / "samples.npz", features=features, ids=np.array([1, 2, 3]))
    body = {"instances": [{"features": row.tolist(), "ids": i} for i, row in zip((7, 8, 9), features)]}
    (tmp_path / "body.json").write_text(json.dumps(body))
    for source, ids in (("samples.npz", [1, 2, 3]), ("body.json", [7, 8, 9])):
        version_dir = exporter.export(model, name="sampled", out=tmp_path / "models",
                                      sample_inputs=tmp_path / source, progress=False)["fp32"]
        manifest = load_manifest(version_dir)
        assert manifest.golden_source == "user"
        np.testing.assert_array_equal(manifest.golden_inputs()["ids"], ids)
        assert manifest.golden_inputs()["ids"].dtype == np.int64
        np.testing.assert_allclose(manifest.golden_inputs()["features"], features)


def test_samples_of_the_wrong_dtype_are_refused(tmp_path):
    with pytest.raises(exporter.ExportError, match="input 'ids' are float64, the input takes int64"):
        exporter.export(user_models.two_inputs(), name="bad", out=tmp_path, progress=False,
                        sample_inputs={"features": np.zeros((2, 3)), "ids": np.zeros(2)})
    assert list(tmp_path.iterdir()) == []


def test_xla_variant_of_a_user_model_agrees_with_fp32_and_takes_the_users_tolerance(tmp_path):
    model = user_models.two_inputs()
    paths = exporter.export(model, name="duo", out=tmp_path, variants=("xla", "fp32"), progress=False,
                            tolerance={"xla": {"atol": 2e-4}})
    assert paths == {"fp32": tmp_path / "duo" / "1", "xla": tmp_path / "duo_xla" / "1"}
    manifest = load_manifest(paths["xla"])
    assert manifest.variant == "xla" and manifest.tolerance["atol"] == 2e-4 and manifest.tolerance["rtol"] == 1e-3
    assert any("--xla_cpu_compilation_enabled" in note for note in manifest.notes)
    assert load_manifest(paths["fp32"]).tolerance["atol"] == 1e-5
    inputs = {"features": RNG.normal(size=(4, 3)).astype(np.float32), "ids": np.array([0, 1, 2, 3], np.int64)}
    np.testing.assert_allclose(session_predict(paths["xla"], inputs)["score"],
                               session_predict(paths["fp32"], inputs)["score"], atol=1e-4)
    validate(paths["xla"])


def test_a_model_xla_cannot_compile_names_the_op_and_keeps_fp32_published(tmp_path):
    with pytest.raises(exporter.VariantFailed) as caught:
        exporter.export(user_models.string_ops_inside(), name="digits_of", out=tmp_path,
                        variants=("fp32", "xla"), progress=False)
    message = str(caught.value)
    assert "XLA cannot compile" in message and "op AsString" in message
    assert caught.value.published == {"fp32": tmp_path / "digits_of" / "1"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["digits_of"]   # no digits_of_xla, no staging
    validate(tmp_path / "digits_of" / "1")


def test_the_xla_variant_of_a_string_input_model_is_refused_in_one_line_before_xla_runs(tmp_path, capfd):
    with pytest.raises(exporter.ExportError) as caught:
        exporter.export(user_models.string_module(), name="lookup", out=tmp_path, variants=("xla",), progress=False)
    assert str(caught.value) == (
        "signature 'serving_default' input 'text' is DT_STRING: the xla variant compiles each signature whole "
        "and XLA cannot take DT_STRING tensors; export this model without the xla variant (fp32)")
    assert "xla" not in capfd.readouterr().err.lower()   # no TensorFlow line of an XLA attempt
    assert list(tmp_path.iterdir()) == []


def test_trt_fp16_of_a_user_model_is_unavailable_here_before_any_work(tmp_path):
    from exporter.variants.trt import unavailable_reason

    if unavailable_reason() is None:  # pragma: no cover - only on a GPU host with TensorRT
        pytest.skip("TensorRT and a GPU are available here; the refusal path does not apply")
    from exporter.variants import VariantUnavailable

    with pytest.raises(VariantUnavailable, match="no GPU is visible"):
        exporter.export(user_models.sequential(), name="mlp", out=tmp_path, variants=("fp32", "trt-fp16"))
    assert list(tmp_path.iterdir()) == []
