"""The napping model of the security tests: a real SavedModel exported with TensorFlow in seconds.

``serving_default``: ``x`` float32 [-1, 3] -> ``y = 2 x`` (the good request and the attacks' target);
``nap``: ``seconds`` float32 [-1] -> ``slept``, after sleeping in TensorFlow's ``SleepDataset`` op,
which sleeps ``max(seconds)`` before each element it reads, the end of the one-element dataset
included: a batch takes 2 x max(seconds) without burning a CPU, so a 2-core machine can overload
the server with a Python client.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from tensorflow_serving.apis import predict_pb2

from serving import codec

__all__ = ["MODEL", "export_napping", "nap_request"]

MODEL = "napping"


def export_napping(path: Path) -> Path:
    """Export the model into ``path`` (a version directory); return it."""
    import tensorflow as tf  # TensorFlow: only when the test models are built

    class Napping(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = tf.Variable(2.0, dtype=tf.float32)

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x):
            return {"y": x * self.scale}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="seconds")])
        def nap(self, seconds):
            micros = tf.cast(tf.reduce_max(seconds) * 1e6, tf.int64)
            dataset = tf.data.Dataset.from_tensors(seconds)
            spec = dict(output_types=[tf.float32], output_shapes=[tf.TensorShape([None])])
            slept = tf.raw_ops.SleepDataset(input_dataset=dataset._variant_tensor,  # noqa: SLF001 - TF's own handle
                                            sleep_microseconds=micros, **spec)
            return {"slept": tf.raw_ops.DatasetToSingleElement(dataset=slept, **spec)[0] * self.scale / 2.0}

    module = Napping()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve, "nap": module.nap})
    return path


def nap_request(seconds: float) -> predict_pb2.PredictRequest:
    """A Predict of the ``nap`` signature: its batch naps 2 x ``seconds``."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name, request.model_spec.signature_name = MODEL, "nap"
    codec.ndarray_to_tensor_proto(np.array([seconds], np.float32), request.inputs["seconds"])
    return request
