"""Three version 2s of digits for the canary analysis tests, built cheaply from version 1.

- ``retrain``: the zoo's digits network trained again with another seed (fewer
  epochs): other weights, the same classes on (nearly) every golden row.
- ``shuffled``: version 1 with its output classes permuted (probabilities
  columns rolled by one, ``classes`` their argmax): fast, error-free, wrong.
- ``slow``: version 1 plus a 50 ms wait per call (a busy loop on
  ``tf.timestamp``: TensorFlow has no sleep op a SavedModel can carry, and a
  ``tf.py_function`` does not survive saving).

Each keeps version 1's ``serving_default`` signature (``images`` ->
``probabilities``, ``classes``). Needs TensorFlow (imported in the builders).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

__all__ = ["build_retrain", "build_wrapped", "SLOW_SECONDS", "RETRAIN_SEED", "RETRAIN_EPOCHS"]

SLOW_SECONDS = 0.05
RETRAIN_SEED, RETRAIN_EPOCHS = 7, 20


def _save_served(out: Path, inner: object, outputs: Callable, track_variables: bool = False) -> Path:
    """Save a module holding ``inner`` whose ``serving_default`` maps ``images`` (N x 8 x 8 x 1 float32) to
    ``outputs(inner, images)``; ``track_variables`` tracks what the signature reads (Keras 3 variables are
    not tf.Module-tracked), as the exporter does."""
    import tensorflow as tf

    class Served(tf.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 1], tf.float32, name="images")])
        def serve(self, images):
            return outputs(self.inner, images)

    module = Served()
    if track_variables:
        module.serving_variables = list(module.serve.get_concrete_function().variables)
    tf.saved_model.save(module, str(out), signatures={"serving_default": module.serve})
    return out


def build_retrain(out: Path) -> Path:
    import keras
    import tensorflow as tf

    from exporter.zoo import digits

    keras.utils.set_random_seed(RETRAIN_SEED)
    x_train, _, y_train, _ = digits._data()
    model = digits._network()
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x_train, y_train, epochs=RETRAIN_EPOCHS, batch_size=64, shuffle=True, verbose=0)

    def outputs(model, images):
        logits = model(images, training=False)
        return {"probabilities": tf.nn.softmax(logits), "classes": tf.argmax(logits, axis=-1)}

    return _save_served(out, model, outputs, track_variables=True)


def build_wrapped(v1: Path, out: Path, kind: str) -> Path:
    import tensorflow as tf

    def outputs(loaded, images):
        start = tf.timestamp()
        probabilities = loaded.signatures["serving_default"](images=images)["probabilities"]
        if kind == "shuffled":
            probabilities = tf.roll(probabilities, shift=1, axis=1)
        if kind == "slow":
            with tf.control_dependencies([probabilities]):
                waited = tf.while_loop(lambda now: now - start < SLOW_SECONDS, lambda now: [tf.timestamp()],
                                       [tf.timestamp()])
            with tf.control_dependencies(waited):
                probabilities = tf.identity(probabilities)
        return {"probabilities": probabilities, "classes": tf.argmax(probabilities, axis=-1)}

    return _save_served(out, tf.saved_model.load(str(v1)), outputs)
