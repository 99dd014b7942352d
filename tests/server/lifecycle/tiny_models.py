"""Tiny real SavedModels for the lifecycle tests, built with TensorFlow in a fixture.

``affine``: ``serving_default`` maps ``x`` float32 [-1, 3] to ``y = scale * x``
(so a response tells which version served it), ``xla`` is the same under
``jit_compile=True``, ``classification`` / ``regression`` are classify- and
regress-style signatures over serialized tf.Examples with a float feature
``x`` of length 3, and ``strings`` maps DT_STRING ``s`` [-1] to its length.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["export_affine", "example", "write_warmup", "publish", "corrupt_version"]


def example(x, **extra_floats):
    """A tf.train.Example with float feature ``x`` (and any other float features)."""
    import tensorflow as tf

    features = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=list(x)))}
    for name, values in extra_floats.items():
        features[name] = tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))
    return tf.train.Example(features=tf.train.Features(feature=features))


def export_affine(path: Path, scale: float) -> Path:
    import tensorflow as tf

    class Affine(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = tf.Variable(scale, dtype=tf.float32)
            self.labels = tf.constant([b"low", b"high"])

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x):
            return {"y": x * self.scale, "total": tf.reduce_sum(x * self.scale, axis=1)}

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")],
                     jit_compile=True)
        def serve_xla(self, x):
            return {"y": x * self.scale}

        def _parse(self, serialized):
            features = tf.io.parse_example(
                serialized, {"x": tf.io.FixedLenFeature([3], tf.float32)})
            return features["x"] * self.scale

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def classify(self, inputs):
            total = tf.reduce_sum(self._parse(inputs), axis=1)
            high = tf.sigmoid(total)
            scores = tf.stack([1.0 - high, high], axis=1)
            classes = tf.tile(self.labels[tf.newaxis, :], [tf.shape(inputs)[0], 1])
            return {"classes": classes, "scores": scores}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def regress(self, inputs):
            return {"outputs": tf.reduce_sum(self._parse(inputs), axis=1)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="s")])
        def strings(self, s):
            return {"length": tf.strings.length(s), "upper": tf.strings.upper(s)}

    module = Affine()
    tf.saved_model.save(module, str(path), signatures={
        "serving_default": module.serve, "xla": module.serve_xla,
        "classification": module.classify, "regression": module.regress,
        "strings": module.strings})
    return path


def write_warmup(version_dir: Path, records: int, kind: str = "predict") -> Path:
    """Write ``records`` PredictionLog records (predict, classify or regress) into the warmup file."""
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import classification_pb2, predict_pb2, prediction_log_pb2, regression_pb2

    from serving.codec import ndarray_to_tensor_proto

    target = version_dir / "assets.extra" / "tf_serving_warmup_requests"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(target)) as writer:
        for i in range(records):
            if kind == "predict":
                request = predict_pb2.PredictRequest()
                request.model_spec.signature_name = "serving_default"
                ndarray_to_tensor_proto(np.full((1, 3), i, np.float32), request.inputs["x"])
                log = prediction_log_pb2.PredictionLog(
                    predict_log=prediction_log_pb2.PredictLog(request=request))
            elif kind == "classify":
                request = classification_pb2.ClassificationRequest()
                request.model_spec.signature_name = "classification"
                request.input.example_list.examples.add().CopyFrom(example([1.0, 2.0, float(i)]))
                log = prediction_log_pb2.PredictionLog(
                    classify_log=prediction_log_pb2.ClassifyLog(request=request))
            else:
                request = regression_pb2.RegressionRequest()
                request.model_spec.signature_name = "regression"
                request.input.example_list.examples.add().CopyFrom(example([1.0, 2.0, float(i)]))
                log = prediction_log_pb2.PredictionLog(
                    regress_log=prediction_log_pb2.RegressLog(request=request))
            writer.write(log.SerializeToString())
    return target


def publish(template: Path, base_path: Path, version: int) -> Path:
    """Copy a built SavedModel into ``base_path/<version>`` the way the exporter publishes:
    into a non-numeric temp dir first, then an atomic rename."""
    base_path.mkdir(parents=True, exist_ok=True)
    temp = base_path / f".tmp-{version}"
    shutil.copytree(template, temp)
    os.rename(temp, base_path / str(version))
    return base_path / str(version)


def corrupt_version(base_path: Path, version: int) -> Path:
    """A half-written version: a truncated saved_model.pb and no variables."""
    target = base_path / str(version)
    target.mkdir(parents=True)
    (target / "saved_model.pb").write_bytes(b"\x08\x01\x12\x05not a saved model")
    return target
