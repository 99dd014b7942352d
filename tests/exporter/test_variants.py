"""Variants: XLA exports and agrees with FP32; TF-TRT refuses cleanly where it cannot run."""
from __future__ import annotations

import numpy as np
import pytest

from exporter.export import export_model
from exporter.manifest import load_manifest
from exporter.validate import validate
from exporter.variants import get_variant
from serving.model_repo import published_name
from tests.support.exporter import run_cli
from tests.support.models import run_in_tf1_session


def test_published_names_keep_variants_side_by_side():
    assert [published_name("digits", v) for v in ("fp32", "xla", "trt-fp16")] == [
        "digits", "digits_xla", "digits_trt_fp16"]
    assert [get_variant(v).published_name("digits") for v in ("fp32", "xla", "trt-fp16")] == [
        "digits", "digits_xla", "digits_trt_fp16"]
    with pytest.raises(ValueError, match="unknown variant 'int8'"):
        published_name("digits", "int8")
    with pytest.raises(ValueError, match="unknown variant 'int8'"):
        get_variant("int8")


def test_unknown_model_is_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="unknown model 'mnist'; the zoo has: digits, resnet50, text, ranker"):
        export_model("mnist", out=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_trt_fp16_exits_nonzero_naming_what_is_missing_and_leaves_nothing(tmp_path):
    from exporter.variants.trt import unavailable_reason

    if unavailable_reason() is None:  # pragma: no cover - only on a GPU host with TensorRT
        pytest.skip("TensorRT and a GPU are available here; the refusal path does not apply")
    out = tmp_path / "models"
    result = run_cli(["export", "--model", "digits", "--variant", "trt-fp16", "--model-repo", str(out)])
    assert result.returncode == 3
    assert "TensorRT" in result.stderr and "no GPU is visible" in result.stderr
    assert "docker compose run --rm exporter export --model digits --variant trt-fp16" in result.stderr
    assert "Epoch" not in result.stdout + result.stderr  # refused before training
    assert not out.exists() or list(out.rglob("*")) == []


def _xla_must_compile_functions(version_dir) -> list[str]:
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel.FromString((version_dir / "saved_model.pb").read_bytes())
    library = saved.meta_graphs[0].graph_def.library
    return [f.signature.name for f in library.function
            if f.attr.get("_XlaMustCompile") is not None and f.attr["_XlaMustCompile"].b]


@pytest.mark.slow   # exports and XLA-compiles a model
def test_xla_variant_exports_validates_and_agrees_with_fp32(model_repo, tmp_path, capsys):
    import tensorflow as tf

    config = tmp_path / "batching.config"
    config.write_text("max_batch_size { value: 3 }\nallowed_batch_sizes: 1\nallowed_batch_sizes: 3\n")
    path = export_model("digits", variant="xla", out=tmp_path / "models", progress=False,
                        batching_config=config)
    captured = capsys.readouterr()
    assert "Epoch" not in captured.out and "export digits_xla" not in captured.err  # progress=False is silent
    assert path == tmp_path / "models" / "digits_xla" / "1"
    assert _xla_must_compile_functions(path), "no jit_compile function in the saved graph"

    run_in_tf1_session(path)  # TF Serving's loader (XLA JIT is on in this TensorFlow)
    report = validate(path)
    assert report.variant == "xla" and report.warmup_batch_sizes == [1, 3]
    manifest = load_manifest(path)
    assert any("--xla_cpu_compilation_enabled" in note for note in manifest.notes)

    fp32_manifest = load_manifest(model_repo / "digits" / "1")
    # Seeded training is reproducible: this process trained the same weights as the cached export.
    for key, want in fp32_manifest.golden_outputs().items():
        np.testing.assert_allclose(manifest.golden_outputs()[key], want, rtol=1e-6, atol=1e-7)
    images = fp32_manifest.golden_inputs()["images"]
    fp32 = tf.saved_model.load(str(model_repo / "digits" / "1")).signatures["serving_default"]
    xla = tf.saved_model.load(str(path)).signatures["serving_default"]
    want, got = fp32(images=tf.constant(images)), xla(images=tf.constant(images))
    np.testing.assert_allclose(got["probabilities"].numpy(), want["probabilities"].numpy(), atol=1e-4)
    np.testing.assert_array_equal(got["classes"].numpy(), want["classes"].numpy())
