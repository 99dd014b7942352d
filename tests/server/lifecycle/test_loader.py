"""Loading SavedModels into a TF1 Session, as TF Serving does, and running them."""
from __future__ import annotations

import numpy as np
import pytest

from serving import status
from serving.server.tensorflow.loader import LoaderOptions, SavedModelLoader
from tests.support.models import corrupt_version, publish


@pytest.fixture
def loaded(affine_templates, tmp_path):
    path = publish(affine_templates[2.0], tmp_path / "affine", 1)
    servable = SavedModelLoader(LoaderOptions()).load("affine", 1, str(path))
    yield servable
    servable.close()


def test_tf2_export_loads_with_signatures_from_the_meta_graph(loaded):
    sig = loaded.signatures["serving_default"]
    assert sig.method_name == "tensorflow/serving/predict"
    x = sig.inputs["x"]
    assert (x.dtype, x.shape, x.tensor_name) == (np.dtype(np.float32), (None, 3), "serving_default_x:0")
    assert loaded.signatures["strings"].inputs["s"].dtype == np.dtype(object)
    assert set(loaded.signature_defs) >= {"serving_default", "xla", "classification", "regression"}
    assert type(loaded.signature_defs["serving_default"]).__name__ == "SignatureDef"


def test_run_feeds_and_fetches_by_alias(loaded):
    out = loaded.run("serving_default", {"x": np.ones((2, 3), np.float32)}, ["y", "total"])
    np.testing.assert_allclose(out["y"], np.full((2, 3), 2.0))
    np.testing.assert_allclose(out["total"], [6.0, 6.0])


def test_jit_compiled_signature_runs_in_the_session(loaded):
    out = loaded.run("xla", {"x": np.arange(3, dtype=np.float32)[None]}, ["y"])
    np.testing.assert_allclose(out["y"], [[0.0, 2.0, 4.0]])


def test_string_signature_takes_bytes_objects(loaded):
    out = loaded.run("strings", {"s": np.array([b"ab", b"xyz"], dtype=object)}, ["length", "upper"])
    assert out["length"].tolist() == [2, 3]
    assert out["upper"].tolist() == [b"AB", b"XYZ"]


def test_run_maps_a_tensorflow_invalid_argument_to_invalid_argument(loaded):
    with pytest.raises(status.InvalidArgument, match="Could not parse example input"):
        loaded.run("regression", {"inputs": np.array([b"not an example"], dtype=object)}, ["outputs"])
    with pytest.raises(status.InvalidArgument, match="Type mismatch: actual double vs. expect float"):
        loaded.run("serving_default", {"x": np.ones((1, 3), np.float64)}, ["y"])


def test_keras3_model_in_a_tf_module_fails_with_failed_precondition_like_tf_serving(tmp_path):
    """tensorflow/serving#2250: such an export loads, but every run reads unrestored variables."""
    import keras
    import tensorflow as tf

    inputs = keras.Input((3,))
    module = tf.Module()
    module.model = keras.Model(inputs, keras.layers.Dense(2, name="dense")(inputs))

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def serve(x):
        return {"y": module.model(x, training=False)}

    tf.saved_model.save(module, str(tmp_path / "1"), signatures={"serving_default": serve})
    servable = SavedModelLoader(LoaderOptions()).load("keras", 1, str(tmp_path / "1"))
    try:
        with pytest.raises(status.FailedPrecondition, match="^FAILED_PRECONDITION: Could not find variable"):
            servable.run("serving_default", {"x": np.ones((1, 3), np.float32)}, ["y"])
    finally:
        servable.close()


def test_run_is_thread_safe_under_concurrent_calls(loaded):
    from concurrent.futures import ThreadPoolExecutor

    def call(i: int) -> float:
        x = np.full((1, 3), i, np.float32)
        return float(loaded.run("serving_default", {"x": x}, ["total"])["total"][0])

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(call, range(200)))
    assert results == [6.0 * i for i in range(200)]


def test_run_wrapper_is_applied_before_warmup(affine_templates, tmp_path):
    from tests.support.models import write_warmup

    path = publish(affine_templates[1.0], tmp_path / "affine", 1)
    write_warmup(path, 4)
    seen = []

    def wrapper(servable, run):
        def wrapped(signature, inputs, outputs):
            seen.append(signature)
            return run(signature, inputs, outputs)
        return wrapped

    servable = SavedModelLoader(LoaderOptions(run_wrapper=wrapper)).load("affine", 1, str(path))
    try:
        assert seen == ["serving_default"] * 4  # warmup went through the wrapper
        servable.run("serving_default", {"x": np.ones((1, 3), np.float32)}, ["y"])
        assert len(seen) == 5
    finally:
        servable.close()


def test_close_runs_close_callbacks_once_then_refuses_runs(loaded):
    calls = []
    loaded.add_close_callback(lambda: calls.append("closed"))
    loaded.close()
    loaded.close()
    assert calls == ["closed"]
    with pytest.raises(status.Unavailable):
        loaded.run_direct("serving_default", {"x": np.ones((1, 3), np.float32)}, ["y"])


@pytest.mark.parametrize("damage, code", [
    ("truncated_pb", status.Code.DATA_LOSS),
    ("empty_dir", status.Code.NOT_FOUND),
    ("no_variables", status.Code.DATA_LOSS),
    ("wrong_tags", status.Code.NOT_FOUND),
])
def test_broken_versions_fail_with_tf_serving_codes(affine_templates, tmp_path, damage, code):
    import shutil

    base = tmp_path / "broken"
    tags = ("serve",)
    if damage == "truncated_pb":
        path = corrupt_version(base, 1)
    elif damage == "empty_dir":
        path = base / "1"
        path.mkdir(parents=True)
    elif damage == "no_variables":
        path = publish(affine_templates[1.0], base, 1)
        shutil.rmtree(path / "variables")
        (path / "variables").mkdir()
    else:
        path = publish(affine_templates[1.0], base, 1)
        tags = ("gpu",)
    metrics_seen = []

    class Recorder:
        def record_load(self, model_path, ok, latency_us):
            metrics_seen.append((model_path, ok))

    loader = SavedModelLoader(LoaderOptions(saved_model_tags=tags), metrics=Recorder())
    with pytest.raises(status.ServingError) as info:
        loader.load("broken", 1, str(path))
    assert info.value.code == code, info.value
    assert metrics_seen == [(str(path), False)]


def test_the_manager_rejects_negative_retries():
    from serving.server.core.manager import ServableManager

    with pytest.raises(ValueError, match="max_num_load_retries"):
        ServableManager(SavedModelLoader(LoaderOptions()), max_num_load_retries=-1)


def test_a_version_loader_estimates_ram_from_its_files_and_loads_once_per_call(affine_templates, tmp_path):
    """TF Serving's estimate (file sizes x 1.2); ``load``/``servable``/``unload`` as ``core.loader`` says."""
    path = publish(affine_templates[2.0], tmp_path / "affine", 1)
    loader = SavedModelLoader(LoaderOptions())("affine", 1, str(path))
    size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    assert loader.estimate_resources() == int(size * 1.2) > 0
    with pytest.raises(RuntimeError, match="not loaded"):
        loader.servable()
    loader.load()
    servable = loader.servable()
    assert (servable.name, servable.version) == ("affine", 1)
    loader.unload()
    with pytest.raises(RuntimeError, match="not loaded"):
        loader.servable()
