"""The exporter's real zoo models through the lifecycle: load + warmup, then golden answers.

Uses the shared ``model_repo`` fixture (digits, text, ranker exported by the
real exporter) read-only.
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.lifecycle import model_server_config, states

ZOO = ("digits", "text", "ranker")

UNSERVABLE_KERAS_EXPORT = (
    "The zoo export cannot be served by a TF1 Session, so real TF Serving fails the same way "
    "(tensorflow/serving#2250, tensorflow/tensorflow#72963): a tf.Module holding a Keras 3 model "
    "saves the Keras variables' copies but the signatures read the originals. Fix in the "
    "exporter: track the raw tf.Variables, e.g. module.tf_variables = "
    "[v.value for v in model.variables]. Load error: ")


@pytest.fixture(scope="module")
def zoo_manager(model_repo):
    from serving.server.core.manager import ServableManager
    from serving.server.tensorflow.loader import LoaderOptions, SavedModelLoader
    from tests.support.lifecycle import Metrics

    metrics = Metrics()
    manager = ServableManager(SavedModelLoader(LoaderOptions(), metrics), max_num_load_retries=0,
                              file_system_poll_wait_seconds=-1)
    manager.start()
    try:
        try:
            manager.reload_config(model_server_config(*[(name, model_repo / name) for name in ZOO]))
        except Exception as exc:
            if "Could not find variable" in str(exc):
                pytest.fail(UNSERVABLE_KERAS_EXPORT + str(exc)[:600], pytrace=False)
            raise
        yield manager, metrics
    finally:
        manager.stop()


def manifest(model_repo, name):
    from exporter.manifest import load_manifest

    return load_manifest(model_repo / name / "1")


@pytest.mark.parametrize("name", ZOO)
def test_zoo_model_loads_and_replays_its_exporter_warmup(zoo_manager, model_repo, name):
    manager, metrics = zoo_manager
    assert states(manager, name) == {1: "AVAILABLE"}
    expected = manifest(model_repo, name).warmup["records"]
    assert (str(model_repo / name / "1"), True, expected) in metrics.warmups


@pytest.mark.parametrize("name", ZOO)
def test_zoo_predict_signatures_reproduce_the_golden_outputs(zoo_manager, model_repo, name):
    from serving.server.tensorflow import inference

    manager, _ = zoo_manager
    info = manifest(model_repo, name)
    checked = 0
    with manager.acquire(name) as servable:
        for signature, golden in info.golden.items():
            if signature in ("classification", "regression"):
                continue
            out = inference.predict(servable, signature, golden.inputs)
            assert set(out) == set(golden.outputs)
            for key, want in golden.outputs.items():
                assert_close(out[key], want, info.tolerance)
            checked += 1
    assert checked >= 1


def _input_from_serialized(serialized: np.ndarray):
    import tensorflow as tf
    from tensorflow_serving.apis import input_pb2

    proto = input_pb2.Input()
    for blob in serialized:
        proto.example_list.examples.add().CopyFrom(tf.train.Example.FromString(bytes(blob)))
    return proto


def test_text_classify_reproduces_the_golden_classes_and_scores(zoo_manager, model_repo):
    from serving.server.tensorflow import inference

    manager, _ = zoo_manager
    info = manifest(model_repo, "text")
    golden = info.golden["classification"]
    with manager.acquire("text") as servable:
        result = inference.classify(servable, "classification",
                                    _input_from_serialized(golden.inputs["inputs"]))
    labels = [[c.label.encode() for c in row.classes] for row in result.classifications]
    scores = np.array([[c.score for c in row.classes] for row in result.classifications])
    assert labels == golden.outputs["classes"].tolist()
    assert_close(scores, golden.outputs["scores"], info.tolerance)


def test_ranker_regress_reproduces_the_golden_outputs(zoo_manager, model_repo):
    from serving.server.tensorflow import inference

    manager, _ = zoo_manager
    info = manifest(model_repo, "ranker")
    golden = info.golden["regression"]
    with manager.acquire("ranker") as servable:
        result = inference.regress(servable, "regression",
                                   _input_from_serialized(golden.inputs["inputs"]))
    values = np.array([r.value for r in result.regressions], np.float32)
    assert_close(values, golden.outputs["outputs"], info.tolerance)


def assert_close(actual: np.ndarray, expected: np.ndarray, tolerance) -> None:
    if expected.dtype.kind in "OSU" or expected.dtype.kind in "iub":
        assert actual.tolist() == expected.tolist()
    else:
        np.testing.assert_allclose(actual, expected, rtol=tolerance.get("rtol", 1e-4),
                                   atol=tolerance.get("atol", 1e-5))
