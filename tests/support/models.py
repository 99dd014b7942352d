"""The suite's models: the zoo's exports cached per exporter version, and the one tiny real SavedModel.

``cached_export(names, variant)`` exports zoo models with the real exporter into
``.cache/test-models/<hash of the exporter's code>`` (a clean clone exports once;
a file lock lets concurrent runs share it).

``export_tiny(path, scale)`` writes the tiny model every server test serves (a
``tf.Module`` that loads in a TF1 Session as TF Serving loads it), copied from a
cache built once per ``scale``:

- ``serving_default``: ``x`` float32 [-1, 3] -> ``y = scale * x`` and ``total`` (row sums),
  so a response tells which version (scale) served it;
- ``xla``: ``y`` alone, under ``jit_compile=True``;
- ``strings``: ``s`` DT_STRING [-1] -> ``length`` int32 and ``upper``;
- ``sleep``: ``seconds`` float32 [-1] -> ``slept``, busy-waiting ``max(seconds)``
  of wall-clock time, so a test can hold a request in flight on a CPU;
- ``nap``: ``seconds`` -> ``slept``, sleeping in TensorFlow's ``SleepDataset`` op before
  each element it reads, the end of the one-element dataset included: a batch takes
  2 x max(seconds) without burning a CPU, so a 2-core machine can overload a server;
- ``classification`` / ``regression``: over serialized tf.Examples with float feature ``x`` [3].
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import time
from pathlib import Path

import numpy as np

from exporter.export import export_model, source_hash
from exporter.manifest import load_manifest
from serving.checkout import REPO_ROOT
from serving.model_repo import published_name

__all__ = ["SMALL_MODELS", "cached_export", "export_tiny", "example", "write_warmup", "publish",
           "corrupt_version", "run_in_tf1_session"]

SMALL_MODELS = ("digits", "text", "ranker")
_CACHE = REPO_ROOT / ".cache" / "test-models"


def _prune_stale(cache: Path, max_age_s: float = 3600.0) -> None:
    """Remove exports of older exporter code (about 140 MB each with resnet50)."""
    if not cache.is_dir():
        return
    for old in cache.iterdir():
        if old.is_dir() and time.time() - old.stat().st_mtime > max_age_s:
            shutil.rmtree(old, ignore_errors=True)


def cached_export(names: tuple[str, ...], variant: str = "fp32") -> Path:
    """The cache's repository root, with ``names`` exported at version 1 in ``variant`` (exported if missing)."""
    root = _CACHE / source_hash()[:16]
    if not root.exists():
        _prune_stale(root.parent)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name in names:
            if not (root / published_name(name, variant) / "1").is_dir():
                export_model(name, variant=variant, version=1, out=root, progress=False)
    return root


def export_tiny(path: Path, scale: float = 2.0) -> Path:
    """Write the tiny model with ``scale`` into ``path`` (a version directory); return it."""
    template = _tiny_template(scale)
    shutil.copytree(template, path)
    return path


def _tiny_template(scale: float) -> Path:
    """The tiny model built once per ``scale`` and version of this file, under the test cache."""
    code = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    root = _CACHE / f"tiny-{code}"
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"scale-{scale:g}"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "saved_model.pb").exists():
            staging = root / f".staging-{os.getpid()}"
            shutil.rmtree(staging, ignore_errors=True)
            _save_tiny(staging, scale)
            os.rename(staging, target)
    return target


def _save_tiny(path: Path, scale: float) -> None:
    import tensorflow as tf  # TensorFlow: only when the model is built

    class Tiny(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = tf.Variable(scale, dtype=tf.float32)

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x):
            y = x * self.scale
            return {"y": y, "total": tf.reduce_sum(y, axis=1)}

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")], jit_compile=True)
        def serve_xla(self, x):
            return {"y": x * self.scale}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="s")])
        def strings(self, s):
            return {"length": tf.strings.length(s), "upper": tf.strings.upper(s)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="seconds")])
        def sleep(self, seconds):
            start = tf.timestamp()
            wanted = tf.cast(tf.reduce_max(seconds), tf.float64)
            tf.while_loop(lambda i: tf.timestamp() - start < wanted, lambda i: i + 1, [tf.constant(0, tf.int64)])
            return {"slept": seconds + 0.0 * self.scale}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="seconds")])
        def nap(self, seconds):
            micros = tf.cast(tf.reduce_max(seconds) * 1e6, tf.int64)
            dataset = tf.data.Dataset.from_tensors(seconds)
            spec = dict(output_types=[tf.float32], output_shapes=[tf.TensorShape([None])])
            slept = tf.raw_ops.SleepDataset(input_dataset=dataset._variant_tensor,  # noqa: SLF001 - TF's own handle
                                            sleep_microseconds=micros, **spec)
            return {"slept": tf.raw_ops.DatasetToSingleElement(dataset=slept, **spec)[0] + 0.0 * self.scale}

        def _x(self, serialized):
            return tf.io.parse_example(serialized, {"x": tf.io.FixedLenFeature([3], tf.float32)})["x"] * self.scale

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def classify(self, inputs):
            high = tf.sigmoid(tf.reduce_sum(self._x(inputs), axis=1))
            classes = tf.tile(tf.constant([[b"low", b"high"]]), [tf.shape(inputs)[0], 1])
            return {"classes": classes, "scores": tf.stack([1.0 - high, high], axis=1)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def regress(self, inputs):
            return {"outputs": tf.reduce_sum(self._x(inputs), axis=1)}

    module = Tiny()
    tf.saved_model.save(module, str(path), signatures={
        "serving_default": module.serve, "xla": module.serve_xla, "strings": module.strings,
        "sleep": module.sleep, "nap": module.nap, "classification": module.classify,
        "regression": module.regress})


def example(x, **extra_floats):
    """A tf.train.Example with float feature ``x`` (and any other float features)."""
    import tensorflow as tf

    features = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=list(x)))}
    for name, values in extra_floats.items():
        features[name] = tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))
    return tf.train.Example(features=tf.train.Features(feature=features))


def write_warmup(version_dir: Path, records: int, kind: str = "predict") -> Path:
    """Write ``records`` PredictionLog records (predict, classify or regress) into the warmup file."""
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
                log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            elif kind == "classify":
                request = classification_pb2.ClassificationRequest()
                request.model_spec.signature_name = "classification"
                request.input.example_list.examples.add().CopyFrom(example([1.0, 2.0, float(i)]))
                log = prediction_log_pb2.PredictionLog(classify_log=prediction_log_pb2.ClassifyLog(request=request))
            else:
                request = regression_pb2.RegressionRequest()
                request.model_spec.signature_name = "regression"
                request.input.example_list.examples.add().CopyFrom(example([1.0, 2.0, float(i)]))
                log = prediction_log_pb2.PredictionLog(regress_log=prediction_log_pb2.RegressLog(request=request))
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


def run_in_tf1_session(version_dir: Path) -> None:
    """Load like TF Serving does (a Session restoring the `serve` meta graph) and replay golden data."""
    import tensorflow as tf

    manifest = load_manifest(version_dir)
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(version_dir))
        for sig, golden in manifest.golden.items():
            signature = meta_graph.signature_def[sig]
            got = session.run({k: signature.outputs[k].name for k in golden.outputs},
                              {signature.inputs[k].name: v for k, v in golden.inputs.items()})
            for key, expected in golden.outputs.items():
                if expected.dtype.kind == "f":
                    np.testing.assert_allclose(got[key], expected, rtol=manifest.tolerance["rtol"],
                                               atol=manifest.tolerance["atol"], err_msg=f"{sig}/{key}")
                else:
                    np.testing.assert_array_equal(got[key], expected, err_msg=f"{sig}/{key}")
