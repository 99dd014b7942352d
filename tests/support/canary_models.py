"""Versions of real models for the canary analysis' verdicts: faithful retrains and broken versions.

Each builder trains (seeded) and publishes one version with the real exporter
(``exporter.export``/``export_model``: manifest, goldens, warmup), the way a
user's training job does, and returns the version directory:

- ``two_head(out, version, seed, epochs, shuffled=False)``: a Keras model of
  the kind users bring, two inputs (``numeric`` float32 [N, 6], ``segment``
  int64 [N] through an Embedding) and two heads: ``score`` (a sigmoid,
  [N, 1]) and ``head`` (a 4-way softmax, [N, 4]). ``shuffled`` trains it on
  the head's classes permuted and the score's labels flipped: a broken version
  that answers fast and without errors.
- ``regression(out, version, seed, steps, shuffled=False)``: a ``tf.Module``
  (no Keras) regression, ``x`` float32 [N, 5] -> ``prediction`` float32 [N],
  trained with ``tf.GradientTape``; ``shuffled`` trains it on targets shuffled
  across rows (it learns the mean, not the function).
- ``zoo_retrain(name, out, version, seed)``: a zoo model trained again on the
  same data from another random seed (initial weights, shuffling, dropout).

Versions of one model share their golden inputs (``samples``: the same seeded
rows), as a team's own held-out split would. TensorFlow and Keras are imported
inside the builders; importing this module is cheap.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["TWO_HEAD", "REGRESSION", "two_head_samples", "regression_samples", "two_head", "regression",
           "zoo_retrain", "main"]

TWO_HEAD, REGRESSION = "two_head", "regression"
_ROWS = 64  # golden rows per version: the analysis replays these


def _two_head_data(n: int, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Rows of the two-head model's task from one fixed ground truth (seed 1234); ``seed`` draws the rows."""
    truth = np.random.default_rng(1234)
    w_class, b_segment = truth.normal(size=(6, 4)), truth.normal(size=(10, 4))
    w_score, s_segment = truth.normal(size=6), truth.normal(size=10)
    rng = np.random.default_rng(seed)
    numeric = rng.normal(size=(n, 6)).astype(np.float32)
    segment = rng.integers(0, 10, size=n).astype(np.int64)
    classes = np.argmax(numeric @ w_class + b_segment[segment] + 0.3 * rng.normal(size=(n, 4)), axis=1)
    p = 1 / (1 + np.exp(-(numeric @ w_score + s_segment[segment])))
    clicked = (rng.random(n) < p).astype(np.float32)
    return {"numeric": numeric, "segment": segment}, classes, clicked


def two_head_samples() -> dict[str, np.ndarray]:
    return _two_head_data(_ROWS, seed=99)[0]


def two_head(out: Path, version: int, seed: int, epochs: int, shuffled: bool = False) -> Path:
    import keras

    import exporter

    keras.utils.set_random_seed(seed)
    inputs, classes, clicked = _two_head_data(4000, seed)
    if shuffled:
        classes, clicked = (classes + 1) % 4, 1 - clicked
    numeric = keras.Input((6,), name="numeric")
    segment = keras.Input((), dtype="int64", name="segment")
    embedded = keras.layers.Embedding(10, 4)(segment)
    hidden = keras.layers.Dense(32, activation="relu")(keras.layers.Concatenate()([numeric, embedded]))
    model = keras.Model([numeric, segment], {"score": keras.layers.Dense(1, activation="sigmoid", name="score")(hidden),
                                             "head": keras.layers.Dense(4, activation="softmax", name="head")(hidden)},
                        name=TWO_HEAD)
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss={"score": "binary_crossentropy", "head": "sparse_categorical_crossentropy"})
    model.fit(inputs, {"score": clicked, "head": classes}, epochs=epochs, batch_size=64, verbose=0)
    return exporter.export(model, name=TWO_HEAD, out=out, version=version, sample_inputs=two_head_samples(),
                           progress=False)["fp32"]


def _regression_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 5)).astype(np.float32)
    y = (np.sin(2 * x[:, 0]) + x[:, 1] * x[:, 2] + 0.5 * x[:, 3] + 0.1 * rng.normal(size=n)).astype(np.float32)
    return x, y


def regression_samples() -> dict[str, np.ndarray]:
    return {"x": _regression_data(_ROWS, seed=99)[0]}


def regression(out: Path, version: int, seed: int, steps: int, shuffled: bool = False) -> Path:
    import tensorflow as tf

    import exporter

    tf.random.set_seed(seed)
    x, y = _regression_data(4000, seed)
    if shuffled:
        y = np.random.default_rng(seed).permutation(y)

    class Regressor(tf.Module):
        def __init__(self) -> None:
            super().__init__(name=REGRESSION)
            self.w1 = tf.Variable(tf.random.normal([5, 32], stddev=0.45, seed=seed))
            self.b1 = tf.Variable(tf.zeros([32]))
            self.w2 = tf.Variable(tf.random.normal([32, 32], stddev=0.25, seed=seed + 1))
            self.b2 = tf.Variable(tf.zeros([32]))
            self.w3 = tf.Variable(tf.random.normal([32, 1], stddev=0.25, seed=seed + 2))
            self.b3 = tf.Variable(tf.zeros([1]))

        def forward(self, x):
            h = tf.nn.relu(x @ self.w1 + self.b1)
            h = tf.nn.relu(h @ self.w2 + self.b2)
            return tf.squeeze(h @ self.w3 + self.b3, axis=-1)

        @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.float32, name="x")])
        def serving_default(self, x):
            return {"prediction": self.forward(x)}

    module = Regressor()
    optimizer = tf.optimizers.Adam(0.01)
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4000, seed=seed).batch(128).repeat()

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(module.forward(xb) - yb))
        grads = tape.gradient(loss, module.trainable_variables)
        optimizer.apply_gradients(zip(grads, module.trainable_variables))
        return loss

    for xb, yb in data.take(steps):
        step(xb, yb)
    return exporter.export(module, name=REGRESSION, out=out, version=version, sample_inputs=regression_samples(),
                           progress=False)["fp32"]


def zoo_retrain(name: str, out: Path, version: int, seed: int) -> Path:
    """Zoo model ``name`` trained again on its data from Keras seed ``seed``, published as ``version``."""
    import keras

    from exporter.export import export_model

    seeded = keras.utils.set_random_seed
    # The zoo's builders seed Keras and their data from one SEED: the data stays, the training's seed moves.
    keras.utils.set_random_seed = lambda _zoo_seed: seeded(seed)
    try:
        return export_model(name, version=version, out=out, progress=False)
    finally:
        keras.utils.set_random_seed = seeded


def main(argv: list[str]) -> None:
    """``python -m tests.support.canary_models KIND OUT VERSION SEED N [shuffled]`` (N: epochs or steps)."""
    kind, out, version, seed = argv[0], Path(argv[1]), int(argv[2]), int(argv[3])
    if kind == TWO_HEAD:
        print(two_head(out, version, seed, int(argv[4]), shuffled="shuffled" in argv[5:]))
    elif kind == REGRESSION:
        print(regression(out, version, seed, int(argv[4]), shuffled="shuffled" in argv[5:]))
    else:
        print(zoo_retrain(kind, out, version, seed))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
