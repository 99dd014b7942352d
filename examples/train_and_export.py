"""Train a digits classifier the way a production job does, then publish it for TF Serving.

A starting point for a team's own training script. It shows, in the order they run:

1. GPU memory growth, set on every GPU before any other TensorFlow call (a no-op on CPU):
   TensorFlow otherwise maps all of each GPU's memory at its first op.
2. ``tf.distribute.MirroredStrategy`` (one replica on a CPU-only host, one per GPU otherwise), and
   mixed precision (``mixed_float16``) only where a GPU is present. The last layer computes in
   float32 (``dtype="float32"``), so the served outputs stay float32 whatever the policy.
3. A ``tf.data`` input pipeline over scikit-learn's bundled 8x8 digits (nothing downloaded):
   per-example work mapped in parallel, cached, shuffled, batched per replica, and prefetched
   with ``tf.data.AUTOTUNE`` so the next batch is ready while the current one trains.
   The model takes raw pixel values (0..16) and rescales them in its graph, so a client sends
   the same numbers the pipeline reads.
4. A checkpoint after every epoch (``tf.train.CheckpointManager`` in ``--work-dir``). Killed at
   any point, the same command resumes after the last completed epoch and says which one.
5. ``exporter.export(...)``: the trained Keras model published into the model repository, with
   rows of the held-out split as golden inputs (their outputs are replayed before publishing).

Run (from the checkout, in its venv)::

    python examples/train_and_export.py                       # train, export fp32 to models/digits_mlp/
    python examples/train_and_export.py --variant fp32 --variant xla
    python examples/train_and_export.py --no-export --work-dir out/run1   # train only

Progress lines on stdout: ``resumed from epoch N/E ...`` or ``starting at epoch 1/E ...``, one
``epoch N/E: ...; checkpoint ...`` line per epoch, ``held-out accuracy ...``, and one
``published VARIANT: DIR`` line per variant. See ``examples/README.md``.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import exporter
from serving.checkout import REPO_ROOT
from serving.model_repo import VARIANT_SUFFIXES

__all__ = [
    "main", "build_parser", "enable_memory_growth", "Splits", "load_splits", "make_dataset",
    "build_model", "EpochCheckpoint", "restore_latest", "INPUT_NAME", "OUTPUT_NAME",
]

DEFAULT_MODEL_REPO = REPO_ROOT / "models"
DEFAULT_NAME = "digits_mlp"
INPUT_NAME = "images"          # the served signature's input: float32 [batch, 8, 8], raw pixels 0..16
OUTPUT_NAME = "probabilities"  # the output layer: float32 [batch, 10] under any dtype policy
SEED = 0
GOLDEN_ROWS = 32               # held-out rows the exporter keeps as goldens and warmup data
CHECKPOINTS_KEPT = 3


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command line (parsed in :func:`main` only)."""
    p = argparse.ArgumentParser(
        prog="python examples/train_and_export.py",
        description="Train a digits MLP with checkpoints and resume, then publish it with exporter.export.")
    p.add_argument("--epochs", type=_positive_int, default=12, metavar="N", help="total epochs (default: 12)")
    p.add_argument("--batch-size", type=_positive_int, default=32, metavar="N",
                   help="examples per replica per step; the global batch is N x replicas (default: 32)")
    p.add_argument("--work-dir", type=Path, default=None, metavar="DIR",
                   help="checkpoints; rerunning with the same DIR resumes "
                        "(default: <checkout>/.cache/examples/NAME)")
    p.add_argument("--model-repo", type=Path, default=DEFAULT_MODEL_REPO, metavar="DIR",
                   help=f"model repository the model is published into (default: {DEFAULT_MODEL_REPO})")
    p.add_argument("--name", default=DEFAULT_NAME, help=f"served model name (default: {DEFAULT_NAME})")
    p.add_argument("--variant", action="append", choices=list(VARIANT_SUFFIXES), default=None,
                   help="variant to publish; repeat for several (default: fp32)")
    p.add_argument("--no-export", action="store_true", help="train (and checkpoint) only")
    return p


def enable_memory_growth() -> list[tf.config.PhysicalDevice]:
    """Let TensorFlow grow GPU memory as needed instead of mapping it all; returns the GPUs.

    Must run before any op: the setting cannot change once a GPU is initialized.
    """
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    return gpus


@dataclass(frozen=True)
class Splits:
    """Raw pixel images float32 [n, 8, 8] (values 0..16) and int64 labels, stratified 80/20."""

    train_images: np.ndarray
    train_labels: np.ndarray
    held_out_images: np.ndarray
    held_out_labels: np.ndarray


def load_splits(seed: int = SEED) -> Splits:
    """scikit-learn's bundled digits (1,797 images; no download), split once with a fixed seed."""
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.images, digits.target, test_size=0.2, random_state=seed, stratify=digits.target)
    return Splits(x_train.astype(np.float32), y_train.astype(np.int64),
                  x_test.astype(np.float32), y_test.astype(np.int64))


def _to_example(image: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    # Per-example work belongs here (decoding, parsing, casting); scaling stays in the model.
    return tf.ensure_shape(tf.cast(image, tf.float32), (8, 8)), tf.cast(label, tf.int32)


def make_dataset(images: np.ndarray, labels: np.ndarray, batch_size: int, *,
                 training: bool, seed: int = SEED) -> tf.data.Dataset:
    """map (parallel) → cache → shuffle (training only) → batch → prefetch(AUTOTUNE).

    ``cache`` keeps the mapped examples after the first epoch; the shuffle comes after it so
    every epoch sees a new order. ``batch_size`` is the global batch.
    """
    ds = tf.data.Dataset.from_tensor_slices((images, labels))
    ds = ds.map(_to_example, num_parallel_calls=tf.data.AUTOTUNE).cache()
    if training:
        ds = ds.shuffle(len(images), seed=seed, reshuffle_each_iteration=True)
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def build_model(learning_rate: float = 1e-3) -> keras.Model:
    """A small MLP on raw pixels; call it inside the strategy's scope.

    Under ``mixed_float16`` the hidden layers compute in float16; the final softmax is float32,
    which keeps the loss numerically stable and the served outputs float32.
    """
    images = keras.Input((8, 8), dtype="float32", name=INPUT_NAME)
    h = keras.layers.Rescaling(1.0 / 16.0)(images)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(128, activation="relu")(h)
    h = keras.layers.Dropout(0.2, seed=SEED)(h)
    h = keras.layers.Dense(64, activation="relu")(h)
    logits = keras.layers.Dense(10, name="logits")(h)
    probabilities = keras.layers.Activation("softmax", dtype="float32", name=OUTPUT_NAME)(logits)
    model = keras.Model(images, probabilities, name="digits_mlp")
    # Keras wraps the optimizer in a LossScaleOptimizer when the policy is mixed_float16.
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss=keras.losses.SparseCategoricalCrossentropy(),
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    # Create the optimizer's slots now, so a checkpoint restores them too (not only the weights).
    model.optimizer.build(model.trainable_variables)
    return model


class EpochCheckpoint(keras.callbacks.Callback):
    """After every epoch: record it in the checkpoint, save, and print one progress line.

    The checkpoint holds the model's weights, the optimizer (slots and step) and ``epoch``, the
    number of completed epochs. ``CheckpointManager`` updates its ``checkpoint`` index file last,
    so a kill during a save leaves the previous checkpoint as the latest.
    """

    def __init__(self, manager: tf.train.CheckpointManager, epoch: tf.Variable, epochs: int):
        super().__init__()
        self._manager = manager
        self._epoch = epoch
        self._epochs = epochs

    def on_epoch_end(self, epoch: int, logs: Mapping[str, float] | None = None) -> None:
        completed = epoch + 1
        self._epoch.assign(completed)
        path = self._manager.save(checkpoint_number=completed)
        metrics = " ".join(f"{k} {v:.4f}" for k, v in sorted((logs or {}).items()))
        print(f"epoch {completed}/{self._epochs}: {metrics}; checkpoint {path}", flush=True)


def restore_latest(checkpoint: tf.train.Checkpoint, manager: tf.train.CheckpointManager,
                   epoch: tf.Variable) -> int:
    """Restore the latest checkpoint if there is one; returns the number of completed epochs."""
    if manager.latest_checkpoint is None:
        return 0
    # Every object of the checkpoint must find its variable here: a changed model fails loudly.
    checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
    return int(epoch.numpy())


def _check_exporter() -> None:
    # Fail before training, not after it, when this checkout has no exporter.export yet.
    if not callable(getattr(exporter, "export", None)):
        raise SystemExit("exporter.export(model, name=..., out=...) is not available in this checkout "
                         "(it needs the exporter of a newer checkout); run with --no-export to train only")


def _publish(model: keras.Model, args: argparse.Namespace, splits: Splits) -> None:
    variants = tuple(args.variant or ("fp32",))
    published = exporter.export(
        model, name=args.name, out=args.model_repo,
        sample_inputs={INPUT_NAME: splits.held_out_images[:GOLDEN_ROWS]},
        variants=variants)
    for variant, version_dir in published.items():
        print(f"published {variant}: {version_dir}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    gpus = enable_memory_growth()  # the first TensorFlow call: before any op touches a GPU
    if not args.no_export:
        _check_exporter()
    keras.utils.set_random_seed(SEED)
    if gpus:
        keras.mixed_precision.set_global_policy("mixed_float16")
    strategy = tf.distribute.MirroredStrategy()
    replicas = strategy.num_replicas_in_sync
    print(f"{replicas} replica(s) on {len(gpus)} GPU(s); dtype policy "
          f"{keras.mixed_precision.global_policy().name}", flush=True)

    splits = load_splits()
    global_batch = args.batch_size * replicas
    train = make_dataset(splits.train_images, splits.train_labels, global_batch, training=True)
    held_out = make_dataset(splits.held_out_images, splits.held_out_labels, global_batch, training=False)

    with strategy.scope():
        model = build_model()
    epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, epoch=epoch)
    work_dir = args.work_dir or REPO_ROOT / ".cache" / "examples" / args.name
    manager = tf.train.CheckpointManager(checkpoint, work_dir / "checkpoints", max_to_keep=CHECKPOINTS_KEPT)
    start = restore_latest(checkpoint, manager, epoch)
    if start:
        print(f"resumed from epoch {start}/{args.epochs} ({manager.latest_checkpoint}); "
              f"continuing at epoch {start + 1}", flush=True)
    else:
        print(f"starting at epoch 1/{args.epochs}: no checkpoint in {manager.directory}", flush=True)

    if start < args.epochs:
        model.fit(train, validation_data=held_out, initial_epoch=start, epochs=args.epochs,
                  shuffle=False,  # the dataset shuffles itself; Keras cannot shuffle a tf.data.Dataset
                  verbose=0, callbacks=[EpochCheckpoint(manager, epoch, args.epochs), keras.callbacks.TerminateOnNaN()])
    accuracy = model.evaluate(held_out, verbose=0, return_dict=True)["accuracy"]
    print(f"trained {int(epoch.numpy())}/{args.epochs} epochs ({int(epoch.numpy()) - start} in this run); "
          f"held-out accuracy {accuracy:.4f} on {len(splits.held_out_labels)} images", flush=True)

    if not args.no_export:
        _publish(model, args, splits)
    return 0


if __name__ == "__main__":
    sys.exit(main())
