"""TF Serving's own test models, rebuilt here with the venv's TensorFlow: ``half_plus_two`` and friends.

TF Serving's tests (``tensorflow_model_server_test.py``,
``http_rest_api_handler_test.cc``, ``server_core_test.cc`` ...) serve the
SavedModels of ``servables/tensorflow/testdata``, written by
``saved_model_half_plus_two.py`` (a TF1 graph: ``y = a*x + b``). This
module writes equivalent ones (same signature keys, aliases, tensor names,
dtypes, shapes and values), each built once per version of this file into
``.cache/test-models/half-plus-two-<hash>`` and copied out:

- ``"half_plus_two"`` (``saved_model_half_plus_two_cpu``): variables a=0.5, b=2,
  c=3, a2=0.5, c2=3; ``serving_default`` (predict ``x`` -> ``y``, both
  float [-1,1]: ``x`` is the parsed Example's feature, not a placeholder, so a
  fed tensor of any shape reaches ``y = 0.5x + 2`` unchecked);
  ``classify_x_to_y`` (``inputs`` serialized tf.Examples, rank unknown, -> ``scores`` y);
  ``regress_x_to_y`` / ``regress_x_to_y2`` (tf.Examples -> ``outputs`` y / y2 =
  0.5x + 3); ``regress_x2_to_y3`` (``inputs`` x2 [-1,1] -> y3 = 0.5 x2 + 3);
  an asset ``foo.txt``.
- ``"half_plus_two_2_versions"`` (``saved_model_half_plus_two_2_versions``, as
  versions 123 and 124): the same without a2 / c2 (y3 = a*x2 + c) and with
  ``classify_x2_to_y3`` too.
- ``"half_plus_three"`` (``saved_model_half_plus_three``): a=0.5, b=3, c=3;
  ``serving_default`` (``x`` -> ``y`` = 0.5x + 3, shapes unset) and
  ``tensorflow/serving/regress`` (``inputs`` -> ``outputs``).
- ``"half_plus_two_tf2"`` (``saved_model_half_plus_two_tf2_cpu``): the export
  script's native TF2 ``tf.Module`` (``tf2=True``), saved by
  ``tf.saved_model.save``: a=0.5, b=2, c=3; ``serving_default`` (``x`` float
  [1] -> ``y``), ``regress_x_to_y`` / ``regress_x_to_y2`` / ``classify_x_to_y``
  (serialized tf.Examples [None] -> ``outputs`` / ``scores``),
  ``regress_x2_to_y3`` / ``classify_x2_to_y3`` (x2 float [1]); an asset ``foo.txt``.

``half_plus_two_model(kind, dest)`` writes one version directory.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from pathlib import Path

from serving.checkout import REPO_ROOT


__all__ = ["KINDS", "TEST_VERSION", "half_plus_two_model", "half_plus_two_repo"]

KINDS = ("half_plus_two", "half_plus_two_2_versions", "half_plus_three", "half_plus_two_tf2")
TEST_VERSION = 123   # TF Serving's testdata versions (00000123, 00000124)
_CACHE = REPO_ROOT / ".cache" / "test-models"


def half_plus_two_model(kind: str, dest: Path) -> Path:
    """Copy the built model ``kind`` (one of ``KINDS``) to the version directory ``dest``; return it."""
    shutil.copytree(_template(kind), dest)
    return dest


def half_plus_two_repo(root: Path) -> Path:
    """TF Serving's testdata layout under ``root``: the three models, versions as TF Serving names them."""
    half_plus_two_model("half_plus_two", root / "saved_model_half_plus_two_cpu" / "00000123")
    half_plus_two_model("half_plus_three", root / "saved_model_half_plus_three" / "00000123")
    for version in ("00000123", "00000124"):
        half_plus_two_model("half_plus_two_2_versions", root / "saved_model_half_plus_two_2_versions" / version)
    return root


def _template(kind: str) -> Path:
    if kind not in KINDS:
        raise ValueError(f"unknown test model {kind!r}; one of {KINDS}")
    code = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    root = _CACHE / f"half-plus-two-{code}"
    root.mkdir(parents=True, exist_ok=True)
    target = root / kind
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "saved_model.pb").exists():
            staging = root / f".staging-{kind}-{os.getpid()}"
            shutil.rmtree(staging, ignore_errors=True)
            _build(kind, staging, root / f".assets-{os.getpid()}")
            os.rename(staging, target)
    return target


def _build(kind: str, path: Path, assets_dir: Path) -> None:
    import tensorflow as tf  # TensorFlow: only when a model is built

    v1 = tf.compat.v1
    assets_dir.mkdir(parents=True, exist_ok=True)
    (assets_dir / "foo.txt").write_text("asset-file-contents")
    if kind == "half_plus_two_tf2":
        _build_tf2(path, assets_dir / "foo.txt")
        shutil.rmtree(assets_dir, ignore_errors=True)
        return
    with tf.Graph().as_default() as graph, v1.Session(graph=graph) as session:
        a = v1.Variable(0.5, name="a")
        b = v1.Variable(3.0 if kind == "half_plus_three" else 2.0, name="b")
        c = v1.Variable(3.0, name="c")
        serialized = v1.placeholder(tf.string, name="tf_example", shape=[None])
        features = v1.io.parse_example(serialized, {
            "x": v1.io.FixedLenFeature([1], dtype=tf.float32),
            "x2": v1.io.FixedLenFeature([1], dtype=tf.float32, default_value=[0.0])})
        x = tf.identity(features["x"], name="x")
        y = tf.identity(tf.add(tf.multiply(a, x), b), name="y")
        y2 = tf.identity(tf.add(tf.multiply(a, x), c), name="y2")
        x2 = tf.identity(features["x2"], name="x2")
        if kind == "half_plus_two":
            y3 = tf.add(tf.multiply(v1.Variable(0.5, name="a2"), x2), v1.Variable(3.0, name="c2"))
        else:
            y3 = tf.add(tf.multiply(a, x2), c)
        y3 = tf.identity(y3, name="y3")
        asset_path = tf.constant(str(assets_dir / "foo.txt"))
        v1.add_to_collection(v1.GraphKeys.ASSET_FILEPATHS, asset_path)
        filename = v1.Variable("foo.txt", name="filename_tensor", trainable=False, collections=[])
        assign_filename = filename.assign("foo.txt")
        session.run(v1.global_variables_initializer())
        builder = v1.saved_model.builder.SavedModelBuilder(str(path))
        builder.add_meta_graph_and_variables(
            session, [v1.saved_model.tag_constants.SERVING],
            signature_def_map=_signatures(kind, serialized, x, y, y2, x2, y3),
            assets_collection=v1.get_collection(v1.GraphKeys.ASSET_FILEPATHS),
            main_op=tf.group(assign_filename))
        builder.save()
    shutil.rmtree(assets_dir, ignore_errors=True)


def _signatures(kind: str, serialized, x, y, y2, x2, y3) -> dict:
    import tensorflow as tf

    sig = tf.compat.v1.saved_model.signature_def_utils.build_signature_def
    info = tf.compat.v1.saved_model.utils.build_tensor_info
    predict, regress, classify = "tensorflow/serving/predict", "tensorflow/serving/regress", "tensorflow/serving/classify"
    if kind == "half_plus_three":
        def unshaped(tensor):
            proto = info(tensor)
            proto.ClearField("tensor_shape")
            return proto
        return {"serving_default": sig({"x": unshaped(x)}, {"y": unshaped(y)}, predict),
                "tensorflow/serving/regress": sig({"inputs": unshaped(serialized)}, {"outputs": unshaped(y)}, regress)}
    def examples():   # TF Serving's export records the tf_example placeholder with an unknown rank
        proto = info(serialized)
        proto.tensor_shape.Clear()
        proto.tensor_shape.unknown_rank = True
        return proto

    signatures = {
        "serving_default": sig({"x": info(x)}, {"y": info(y)}, predict),
        "classify_x_to_y": sig({"inputs": examples()}, {"scores": info(y)}, classify),
        "regress_x_to_y": sig({"inputs": examples()}, {"outputs": info(y)}, regress),
        "regress_x_to_y2": sig({"inputs": examples()}, {"outputs": info(y2)}, regress),
        "regress_x2_to_y3": sig({"inputs": info(x2)}, {"outputs": info(y3)}, regress),
    }
    if kind == "half_plus_two_2_versions":
        signatures["classify_x2_to_y3"] = sig({"inputs": info(x2)}, {"scores": info(y3)}, classify)
    return signatures


def _build_tf2(path: Path, asset: Path) -> None:
    """The export script's ``HalfPlusTwoModel`` (``tf2=True``): y = a*x + b, y2 = a*x + c, y3 = a*x2 + c."""
    import tensorflow as tf

    def parsed_x(serialized):
        return tf.io.parse_example(serialized, {
            "x": tf.io.FixedLenFeature([1], dtype=tf.float32),
            "x2": tf.io.FixedLenFeature([1], dtype=tf.float32, default_value=[0.0])})["x"]

    examples = tf.TensorSpec([None], tf.string, name="inputs")
    module = tf.Module()
    module.a, module.b, module.c = tf.Variable(0.5, name="a"), tf.Variable(2.0, name="b"), tf.Variable(3.0, name="c")
    module.asset = tf.saved_model.Asset(str(asset))
    module.predict = tf.function(lambda x: {"y": module.a * x + module.b},
                                 input_signature=[tf.TensorSpec([1], tf.float32)])
    module.regress_xy = tf.function(lambda serialized_proto: {"outputs": module.a * parsed_x(serialized_proto) + module.b},
                                    input_signature=[examples])
    module.regress_xy2 = tf.function(lambda serialized_proto: {"outputs": module.a * parsed_x(serialized_proto) + module.c},
                                     input_signature=[examples])
    module.regress_x2y3 = tf.function(lambda x2: {"outputs": module.a * x2 + module.c},
                                      input_signature=[tf.TensorSpec([1], tf.float32, name="inputs")])
    module.classify_xy = tf.function(lambda serialized_proto: {"scores": module.a * parsed_x(serialized_proto) + module.b},
                                     input_signature=[examples])
    module.classify_x2y3 = tf.function(lambda x2: {"scores": module.a * x2 + module.c},
                                       input_signature=[tf.TensorSpec([1], tf.float32, name="inputs")])
    tf.saved_model.save(module, str(path), signatures={
        "serving_default": module.predict, "regress_x_to_y": module.regress_xy,
        "regress_x_to_y2": module.regress_xy2, "regress_x2_to_y3": module.regress_x2y3,
        "classify_x_to_y": module.classify_xy, "classify_x2_to_y3": module.classify_x2y3})

