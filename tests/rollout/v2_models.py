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

__all__ = ["build_retrain", "build_wrapped", "SLOW_SECONDS", "RETRAIN_SEED", "RETRAIN_EPOCHS"]

SLOW_SECONDS = 0.05
RETRAIN_SEED, RETRAIN_EPOCHS = 7, 20


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

    class Retrained(tf.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 1], tf.float32, name="images")])
        def serve(self, images):
            logits = self.model(images, training=False)
            return {"probabilities": tf.nn.softmax(logits), "classes": tf.argmax(logits, axis=-1)}

    module = Retrained()
    # Keras 3 variables are not tf.Module-tracked: track what the signature reads, as the exporter does.
    module.serving_variables = list(module.serve.get_concrete_function().variables)
    tf.saved_model.save(module, str(out), signatures={"serving_default": module.serve})
    return out


def build_wrapped(v1: Path, out: Path, kind: str) -> Path:
    import tensorflow as tf

    loaded = tf.saved_model.load(str(v1))

    class Wrapped(tf.Module):
        def __init__(self):
            super().__init__()
            self.inner = loaded

        @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 1], tf.float32, name="images")])
        def serve(self, images):
            start = tf.timestamp()
            result = self.inner.signatures["serving_default"](images=images)
            probabilities = result["probabilities"]
            if kind == "shuffled":
                probabilities = tf.roll(probabilities, shift=1, axis=1)
            if kind == "slow":
                with tf.control_dependencies([probabilities]):
                    waited = tf.while_loop(lambda now: now - start < SLOW_SECONDS, lambda now: [tf.timestamp()],
                                           [tf.timestamp()])
                with tf.control_dependencies(waited):
                    probabilities = tf.identity(probabilities)
            return {"probabilities": probabilities, "classes": tf.argmax(probabilities, axis=-1)}

    module = Wrapped()
    tf.saved_model.save(module, str(out), signatures={"serving_default": module.serve})
    return out
