"""``resnet50``: the Keras ResNet-50 architecture with seeded random weights.

No pretrained weights are downloaded (``weights=None``); it is the
performance model, so its answers mean nothing, but its cost is real.
``serving_default``: ``images`` float32 [batch, 224, 224, 3] with pixel
values 0..255 (RGB; the Keras ResNet preprocessing runs in-graph) →
``probabilities`` float32 [batch, 1000] and ``classes`` int64 [batch].
"""
from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from exporter.zoo.base import SEED, BuiltModel
from serving.codec import DEFAULT_SIGNATURE

__all__ = ["build", "IMAGE_SIZE"]

IMAGE_SIZE = 224
GOLDEN_ROWS = 2


def build(*, progress: bool = True) -> BuiltModel:
    """Build ResNet-50 with seeded initial weights (no training)."""

    keras.utils.set_random_seed(SEED)
    model = keras.applications.ResNet50(weights=None, input_shape=(IMAGE_SIZE, IMAGE_SIZE, 3),
                                        classes=1000, classifier_activation=None)
    def core(images):
        return model(keras.applications.resnet50.preprocess_input(images), training=False)

    def make_signatures(core_fn):
        @tf.function(input_signature=[
            tf.TensorSpec([None, IMAGE_SIZE, IMAGE_SIZE, 3], tf.float32, name="images")])
        def predict(images):
            logits = core_fn(images)
            return {"probabilities": tf.nn.softmax(logits), "classes": tf.argmax(logits, axis=-1)}

        return {DEFAULT_SIGNATURE: predict}

    rng = np.random.default_rng(SEED)
    images = rng.integers(0, 256, size=(GOLDEN_ROWS, IMAGE_SIZE, IMAGE_SIZE, 3)).astype(np.float32)
    return BuiltModel(
        name="resnet50", core=core, make_signatures=make_signatures,
        golden_inputs={DEFAULT_SIGNATURE: {"images": images}},
        top1_outputs={DEFAULT_SIGNATURE: "probabilities"},
        metrics={"weights": f"seeded random initialisation (seed {SEED}), weights=None; no accuracy"},
        notes=("resnet50 has random weights: it measures serving cost, not quality.",))
