"""``digits``: a small CNN trained on scikit-learn's bundled 8x8 digits images.

Inputs are the raw pixel values (0..16) as ``images`` float32 [batch, 8, 8, 1];
the model rescales in-graph. ``serving_default`` returns ``probabilities``
[batch, 10] and ``classes`` int64 [batch]; the ``logits`` signature returns
``logits`` [batch, 10]. Seeded; trains in about ten seconds on two cores.
"""
from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from exporter.zoo.base import SEED, BuiltModel
from serving.codec import DEFAULT_SIGNATURE

__all__ = ["build", "GOLDEN_ROWS"]

GOLDEN_ROWS = 32
EPOCHS = 30


def _data():

    digits = load_digits()
    images = digits.images.astype(np.float32)[..., None]
    return train_test_split(images, digits.target.astype(np.int64), test_size=0.2,
                            random_state=SEED, stratify=digits.target)


def _network():

    inputs = keras.Input((8, 8, 1), name="images")
    h = keras.layers.Rescaling(1.0 / 16.0)(inputs)
    h = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(h)
    h = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(h)
    h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    h = keras.layers.Dropout(0.2, seed=SEED)(h)
    return keras.Model(inputs, keras.layers.Dense(10, name="logits")(h), name="digits")


def build(*, progress: bool = True) -> BuiltModel:
    """Train the digits CNN and measure held-out accuracy."""

    keras.utils.set_random_seed(SEED)
    x_train, x_test, y_train, y_test = _data()
    model = _network()
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x_train, y_train, epochs=EPOCHS, batch_size=64, shuffle=True,
              verbose=2 if progress else 0)
    predicted = np.argmax(model.predict(x_test, verbose=0), axis=-1)
    accuracy = float(np.mean(predicted == y_test))

    def core(images):
        return model(images, training=False)

    def make_signatures(core_fn):
        spec = tf.TensorSpec([None, 8, 8, 1], tf.float32, name="images")

        @tf.function(input_signature=[spec])
        def predict(images):
            logits = core_fn(images)
            return {"probabilities": tf.nn.softmax(logits), "classes": tf.argmax(logits, axis=-1)}

        @tf.function(input_signature=[spec])
        def logits(images):
            return {"logits": core_fn(images)}

        return {DEFAULT_SIGNATURE: predict, "logits": logits}

    golden = {"images": x_test[:GOLDEN_ROWS]}
    return BuiltModel(
        name="digits", core=core, make_signatures=make_signatures,
        golden_inputs={DEFAULT_SIGNATURE: golden, "logits": golden},
        labels={DEFAULT_SIGNATURE: y_test[:GOLDEN_ROWS], "logits": y_test[:GOLDEN_ROWS]},
        top1_outputs={DEFAULT_SIGNATURE: "probabilities", "logits": "logits"},
        accuracy=accuracy,
        metrics={"accuracy": accuracy, "held_out_examples": int(len(y_test)),
                 "train_examples": int(len(y_train)), "epochs": EPOCHS,
                 "dataset": "sklearn.datasets.load_digits (8x8, values 0..16), stratified 80/20 split"})
