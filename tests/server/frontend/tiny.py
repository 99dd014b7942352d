"""A tiny real SavedModel for the front-end tests, exported with TensorFlow.

``serving_default``: ``x`` float32 [-1, 3] -> ``y = 2 x`` and ``total`` (row sums);
``strings``: ``s`` DT_STRING [-1] -> ``length`` int32;
``sleep``: ``seconds`` float32 [-1] -> ``slept`` float32 [-1], busy-waiting
``max(seconds)`` of wall-clock time, so a test can hold a request in flight;
``classification`` / ``regression``: over serialized tf.Examples with float feature ``x`` [3].
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["export_tiny"]


def export_tiny(path: Path) -> Path:
    """Export the model into ``path`` (a version directory); return it."""
    import tensorflow as tf

    class Tiny(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = tf.Variable(2.0, dtype=tf.float32)

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x):
            y = x * self.scale
            return {"y": y, "total": tf.reduce_sum(y, axis=1)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="s")])
        def strings(self, s):
            return {"length": tf.strings.length(s)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="seconds")])
        def sleep(self, seconds):
            start = tf.timestamp()
            wanted = tf.cast(tf.reduce_max(seconds), tf.float64)
            tf.while_loop(lambda i: tf.timestamp() - start < wanted, lambda i: i + 1,
                          [tf.constant(0, tf.int64)])
            return {"slept": seconds + 0.0 * self.scale}

        def _x(self, serialized):
            return tf.io.parse_example(serialized, {"x": tf.io.FixedLenFeature([3], tf.float32)})["x"]

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def classify(self, inputs):
            high = tf.sigmoid(tf.reduce_sum(self._x(inputs) * self.scale, axis=1))
            classes = tf.tile(tf.constant([[b"low", b"high"]]), [tf.shape(inputs)[0], 1])
            return {"classes": classes, "scores": tf.stack([1.0 - high, high], axis=1)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def regress(self, inputs):
            return {"outputs": tf.reduce_sum(self._x(inputs) * self.scale, axis=1)}

    module = Tiny()
    tf.saved_model.save(module, str(path), signatures={
        "serving_default": module.serve, "strings": module.strings, "sleep": module.sleep,
        "classification": module.classify, "regression": module.regress})
    return path
