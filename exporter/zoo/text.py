"""``text``: a topic classifier whose signatures take raw strings.

Tokenization happens in the graph (lower-case, strip punctuation, split on
whitespace, hash each token into ``NUM_BUCKETS``), so clients send plain
UTF-8 strings (DT_STRING). Trained on seeded synthetic sentences about four
topics (no downloaded corpus exists offline).

Signatures:
- ``serving_default``: ``text`` DT_STRING [batch] → ``probabilities`` float32
  [batch, 4], ``class_id`` int64 [batch], ``label`` DT_STRING [batch].
- ``classification`` (Classify API): ``inputs`` = serialized tf.Example with a
  bytes feature ``text`` → ``classes`` DT_STRING [batch, 4] and ``scores``
  float32 [batch, 4], the shape TF Serving's classifier expects.
"""
from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from exporter.signatures import serialize_examples
from exporter.zoo.base import SEED, BuiltModel
from serving.codec import DEFAULT_SIGNATURE

__all__ = ["build", "LABELS", "NUM_BUCKETS", "MAX_TOKENS"]

LABELS = ("sports", "weather", "technology", "food")
NUM_BUCKETS = 2048
MAX_TOKENS = 32
EMBEDDING_DIM = 32
GOLDEN_ROWS = 16
EPOCHS = 8

_TOPIC_WORDS = {
    "sports": "match goal team score league coach player season win stadium referee tournament "
              "football tennis basketball champion",
    "weather": "rain sunny forecast storm cloud temperature wind snow humid cold warm degrees "
               "thunder drizzle fog breeze",
    "technology": "software computer chip network cloud server code algorithm data laptop phone "
                  "robot internet update battery model",
    "food": "recipe pasta bread cheese soup dinner lunch spicy sweet bake kitchen chef salad "
            "flavor taste restaurant",
}
_FILLER = ("the a today we they it was is very really quite this that with and for on in of "
           "our my about new some").split()


def _sentences(n: int, rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    words = {k: v.split() for k, v in _TOPIC_WORDS.items()}
    labels = rng.integers(0, len(LABELS), size=n)
    texts = []
    for label in labels:
        topic = words[LABELS[label]]
        length = int(rng.integers(4, 14))
        tokens = [topic[rng.integers(len(topic))] if rng.random() < 0.45
                  else _FILLER[rng.integers(len(_FILLER))] for _ in range(length)]
        tokens[rng.integers(length)] = topic[rng.integers(len(topic))]
        sentence = " ".join(tokens).capitalize() + rng.choice([".", "!", "?", ""])
        texts.append(sentence)
    return texts, labels.astype(np.int64)


def tokenize(text):
    """Strings [batch] → token ids int64 [batch, MAX_TOKENS]; 0 pads, ids are 1..NUM_BUCKETS."""

    cleaned = tf.strings.regex_replace(tf.strings.lower(text), r"[^a-z0-9' ]+", " ")
    tokens = tf.strings.split(cleaned)
    ids = tf.strings.to_hash_bucket_fast(tokens, NUM_BUCKETS) + 1
    return ids.to_tensor(default_value=0, shape=[None, MAX_TOKENS])


def _network():

    class MeanOfTokens(keras.layers.Layer):
        """Mean of the token embeddings, ignoring padding; zeros for a text without tokens."""

        def call(self, embedded, ids):
            mask = ops.expand_dims(ops.cast(ops.greater(ids, 0), embedded.dtype), -1)
            return ops.sum(embedded * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1.0)

    ids = keras.Input((MAX_TOKENS,), dtype="int64", name="token_ids")
    h = keras.layers.Embedding(NUM_BUCKETS + 1, EMBEDDING_DIM)(ids)
    h = MeanOfTokens()(h, ids)
    h = keras.layers.Dense(32, activation="relu")(h)
    return keras.Model(ids, keras.layers.Dense(len(LABELS), name="logits")(h), name="text")


def build(*, progress: bool = True) -> BuiltModel:
    """Train the topic classifier on seeded synthetic sentences."""

    keras.utils.set_random_seed(SEED)
    rng = np.random.default_rng(SEED)
    train_text, y_train = _sentences(3000, rng)
    test_text, y_test = _sentences(600, rng)
    model = _network()
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(tokenize(tf.constant(train_text)).numpy(), y_train, epochs=EPOCHS, batch_size=64,
              verbose=2 if progress else 0)
    predicted = np.argmax(model.predict(tokenize(tf.constant(test_text)).numpy(), verbose=0), -1)
    accuracy = float(np.mean(predicted == y_test))

    def core(token_ids):
        return model(token_ids, training=False)

    def make_signatures(core_fn):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        def predict(text):
            probabilities = tf.nn.softmax(core_fn(tokenize(text)))
            class_id = tf.argmax(probabilities, axis=-1)
            return {"probabilities": probabilities, "class_id": class_id,
                    "label": tf.gather(tf.constant(LABELS), class_id)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def classification(inputs):
            features = tf.io.parse_example(
                inputs, {"text": tf.io.FixedLenFeature([], tf.string, default_value="")})
            scores = tf.nn.softmax(core_fn(tokenize(features["text"])))
            classes = tf.tile(tf.constant([LABELS]), [tf.shape(scores)[0], 1])
            return {"classes": tf.ensure_shape(classes, [None, len(LABELS)]), "scores": scores}

        return {DEFAULT_SIGNATURE: predict, "classification": classification}

    golden_text = np.empty(GOLDEN_ROWS, dtype=object)
    golden_text[:] = [t.encode("utf-8") for t in test_text[:GOLDEN_ROWS]]
    golden_examples = serialize_examples([{"text": t} for t in golden_text])
    golden_labels = np.array([LABELS[i].encode() for i in y_test[:GOLDEN_ROWS]], dtype=object)
    return BuiltModel(
        name="text", core=core, make_signatures=make_signatures,
        golden_inputs={DEFAULT_SIGNATURE: {"text": golden_text},
                       "classification": {"inputs": golden_examples}},
        labels={DEFAULT_SIGNATURE: golden_labels, "classification": golden_labels},
        top1_outputs={DEFAULT_SIGNATURE: "probabilities", "classification": "scores"},
        accuracy=accuracy,
        metrics={"accuracy": accuracy, "held_out_examples": len(test_text), "labels": list(LABELS),
                 "dataset": "seeded synthetic topic sentences (4 topics)"})
