"""``ranker``: a click model with several named inputs and outputs of mixed dtypes.

Trained on seeded synthetic clicks. Ids may be any int64; the graph folds
them into its embedding tables (``floormod``).

Signatures:
- ``serving_default``: ``user_id`` int64 [batch], ``item_id`` int64 [batch],
  ``features`` float32 [batch, 8] → ``score`` float32 [batch] (logit),
  ``probability`` float32 [batch], ``user_embedding`` float32 [batch, 8].
- ``regression`` (Regress API): ``inputs`` = serialized tf.Example with
  ``user_id`` and ``item_id`` (int64_list) and ``features`` (float_list of 8)
  → ``outputs`` float32 [batch] (the click probability).
"""
from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from sklearn.metrics import roc_auc_score

from exporter.signatures import serialize_examples
from exporter.zoo.base import SEED, BuiltModel
from serving.codec import DEFAULT_SIGNATURE

__all__ = ["build", "NUM_FEATURES", "NUM_USERS", "NUM_ITEMS"]

NUM_FEATURES = 8
NUM_USERS = 1000
NUM_ITEMS = 500
EMBEDDING_DIM = 8
GOLDEN_ROWS = 16
EPOCHS = 5


def _clicks(n: int, rng: np.random.Generator, truth: dict) -> dict:
    users = rng.integers(0, 10 * NUM_USERS, size=n)
    items = rng.integers(0, 10 * NUM_ITEMS, size=n)
    features = rng.normal(size=(n, NUM_FEATURES)).astype(np.float32)
    logit = (features @ truth["w"] + truth["user_bias"][users % NUM_USERS]
             + truth["item_bias"][items % NUM_ITEMS])
    clicked = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
    return {"user_id": users.astype(np.int64), "item_id": items.astype(np.int64),
            "features": features, "clicked": clicked}


def _network():

    user = keras.Input((), dtype="int64", name="user")
    item = keras.Input((), dtype="int64", name="item")
    features = keras.Input((NUM_FEATURES,), name="features")
    user_vec = keras.layers.Embedding(NUM_USERS, EMBEDDING_DIM, name="user_embedding")(user)
    item_vec = keras.layers.Embedding(NUM_ITEMS, EMBEDDING_DIM, name="item_embedding")(item)
    h = keras.layers.Concatenate()([user_vec, item_vec, user_vec * item_vec, features])
    h = keras.layers.Dense(32, activation="relu")(h)
    score = keras.layers.Dense(1, name="score")(h)
    return keras.Model([user, item, features], [score, user_vec], name="ranker")


def build(*, progress: bool = True) -> BuiltModel:
    """Train the click model on seeded synthetic data; report held-out AUC."""

    keras.utils.set_random_seed(SEED)
    rng = np.random.default_rng(SEED)
    truth = {"w": rng.normal(size=NUM_FEATURES), "user_bias": rng.normal(size=NUM_USERS),
             "item_bias": rng.normal(size=NUM_ITEMS)}
    train, test = _clicks(20_000, rng, truth), _clicks(5_000, rng, truth)
    model = _network()
    def core(user_id, item_id, features):
        score, user_vec = model(
            [tf.math.floormod(user_id, NUM_USERS), tf.math.floormod(item_id, NUM_ITEMS), features],
            training=False)
        return tf.squeeze(score, axis=-1), user_vec

    trainer = keras.Model(model.inputs, model.outputs[0])
    trainer.compile(optimizer=keras.optimizers.Adam(1e-2),
                    loss=keras.losses.BinaryCrossentropy(from_logits=True))
    def folded(d):
        return [d["user_id"] % NUM_USERS, d["item_id"] % NUM_ITEMS, d["features"]]

    trainer.fit(folded(train), train["clicked"], epochs=EPOCHS, batch_size=256,
                verbose=2 if progress else 0)
    auc = float(roc_auc_score(test["clicked"], trainer.predict(folded(test), verbose=0)[:, 0]))

    def make_signatures(core_fn):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name="user_id"),
                                      tf.TensorSpec([None], tf.int64, name="item_id"),
                                      tf.TensorSpec([None, NUM_FEATURES], tf.float32, name="features")])
        def predict(user_id, item_id, features):
            score, user_vec = core_fn(user_id, item_id, features)
            return {"score": score, "probability": tf.sigmoid(score), "user_embedding": user_vec}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def regression(inputs):
            parsed = tf.io.parse_example(inputs, {
                "user_id": tf.io.FixedLenFeature([], tf.int64),
                "item_id": tf.io.FixedLenFeature([], tf.int64),
                "features": tf.io.FixedLenFeature([NUM_FEATURES], tf.float32)})
            score, _ = core_fn(parsed["user_id"], parsed["item_id"], parsed["features"])
            return {"outputs": tf.sigmoid(score)}

        return {DEFAULT_SIGNATURE: predict, "regression": regression}

    golden = {k: test[k][:GOLDEN_ROWS] for k in ("user_id", "item_id", "features")}
    examples = serialize_examples([{k: v[i] for k, v in golden.items()} for i in range(GOLDEN_ROWS)])
    return BuiltModel(
        name="ranker", core=core, make_signatures=make_signatures,
        golden_inputs={DEFAULT_SIGNATURE: golden, "regression": {"inputs": examples}},
        labels={DEFAULT_SIGNATURE: test["clicked"][:GOLDEN_ROWS],
                "regression": test["clicked"][:GOLDEN_ROWS]},
        metrics={"auc": auc, "held_out_examples": 5_000,
                 "dataset": "seeded synthetic clicks (logistic ground truth)"})
