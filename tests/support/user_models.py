"""Tiny user models, built in seconds, for the exporter tests (and ``--from tests.support.user_models:NAME``).

Each factory takes no arguments and returns a fresh, seeded model, the way
a training script's ``module:factory`` would. TensorFlow and Keras are
imported inside the factories so that importing this module stays cheap.
"""
from __future__ import annotations

from typing import Any

__all__ = [
    "VOCABULARY",
    "sequential",
    "two_inputs",
    "string_module",
    "fixed_batch",
    "unknown_dimension",
    "no_signatures",
    "string_ops_inside",
]

VOCABULARY = (b"red", b"green", b"blue")


def sequential() -> Any:
    """A Keras Sequential MLP: ``x`` float32 [batch, 4] → ``output_0`` float32 [batch, 3]."""
    import keras  # Keras: only when the model is built

    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((4,), name="x"), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(3)], name="mlp")


def two_inputs() -> Any:
    """A functional model: ``features`` float32 [batch, 3] and ``ids`` int64 [batch] through an Embedding."""
    import keras  # Keras: only when the model is built

    keras.utils.set_random_seed(0)
    features = keras.Input((3,), name="features")
    ids = keras.Input((), dtype="int64", name="ids")
    embedded = keras.layers.Embedding(10, 4)(ids)
    hidden = keras.layers.Dense(5, activation="tanh")(keras.layers.Concatenate()([features, embedded]))
    return keras.Model([features, ids], {"score": keras.layers.Dense(1)(hidden), "embedding": embedded},
                       name="two_inputs")


def string_module() -> Any:
    """A tf.Module taking ``text`` strings: their length and their id in a lookup table (-1: unknown)."""
    import tensorflow as tf  # TensorFlow: only when the model is built

    class Lookup(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(tf.constant(VOCABULARY),
                                                    tf.range(len(VOCABULARY), dtype=tf.int64)), -1)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        def __call__(self, text):
            return {"length": tf.strings.length(text), "id": self.table.lookup(text)}

    return Lookup()


def fixed_batch() -> Any:
    """A Keras model built for batch 32 exactly: ``x`` float32 [32, 4] → ``output_0`` [32, 2]."""
    import keras  # Keras: only when the model is built

    keras.utils.set_random_seed(0)
    x = keras.Input((4,), batch_size=32, name="x")
    return keras.Model(x, keras.layers.Dense(2)(x), name="fixed_batch")


def unknown_dimension() -> Any:
    """A Keras model over token sequences of any length: ``tokens`` int32 [batch, ?]."""
    import keras  # Keras: only when the model is built

    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(20, 4)(tokens))
    return keras.Model(tokens, pooled, name="bag_of_tokens")


def no_signatures() -> Any:
    """A tf.Module with a variable and no tf.function: nothing to serve."""
    import tensorflow as tf  # TensorFlow: only when the model is built

    module = tf.Module()
    module.weight = tf.Variable(1.0)
    return module


def string_ops_inside() -> Any:
    """Numeric in and out, but a string op in between: fine in fp32, not compilable by XLA."""
    import tensorflow as tf  # TensorFlow: only when the model is built

    class Digits(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serving_default(self, x):
            return {"digits": tf.strings.length(tf.strings.as_string(x, precision=2)), "twice": 2.0 * x}

    return Digits()
