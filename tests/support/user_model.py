"""A user's own tiny model, saved with ``tf.saved_model.save`` and NO manifest: the load tests' "any model".

Not a zoo name. Signatures (batch dimension first, unknown):

- ``serving_default``: ``features`` float32 [-1, 4] and ``bucket`` int64 [-1] →
  ``scores`` float32 [-1, 2] (``features @ w + bucket``);
- ``pooled``: ``tokens`` float32 [-1, -1] → ``mean`` float32 [-1]: the second
  dimension is unknown too, so a payload needs ``--shape tokens:N``;
- ``length``: ``text`` string [-1] → ``chars`` int32 [-1].

A ``tf.Module`` whose ``tf.function``s read ``tf.Variable`` attributes loads in
a TF1 Session as TF Serving loads it (unlike Keras 3's ``tf.saved_model.save``).
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["MODEL_NAME", "export_user_model"]

MODEL_NAME = "user_mlp"


def export_user_model(model_dir: Path, version: int = 1) -> Path:
    """Save the model as ``model_dir/<version>`` (a SavedModel, nothing else); return the version directory."""
    import tensorflow as tf  # TensorFlow: only to build the model

    class UserMlp(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(tf.reshape(tf.range(8, dtype=tf.float32) / 8.0, [4, 2]))
            self.scale = tf.Variable(3.0)

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="features"),
                                      tf.TensorSpec([None], tf.int64, name="bucket")])
        def serve(self, features, bucket):
            return {"scores": tf.matmul(features, self.w) + tf.cast(bucket, tf.float32)[:, tf.newaxis]}

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32, name="tokens")])
        def pooled(self, tokens):
            return {"mean": tf.reduce_mean(tokens, axis=1) * self.scale}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        def length(self, text):
            return {"chars": tf.strings.length(text)}

    module = UserMlp()
    version_dir = Path(model_dir) / str(version)
    tf.saved_model.save(module, str(version_dir), signatures={
        "serving_default": module.serve, "pooled": module.pooled, "length": module.length})
    return version_dir
