"""The SavedModel as a peer server serves it: ``tf.saved_model.load`` and the eager signature call.

Runs inside each peer's own virtual environment (``benchmarks.peers`` builds
them), where only TensorFlow, numpy and the peer's web framework are
installed: nothing of this repository is imported here. The request body is TF
Serving's REST Predict body in row format (``{"instances": [...]}``); the answer
is ``{"predictions": [...]}`` as TF Serving writes it (one output: its rows; several:
one ``{name: value}`` object per row).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

__all__ = ["SavedModelPredictor"]


class SavedModelPredictor:
    """One SavedModel's signature, called eagerly; ``predict`` is safe from several threads."""

    def __init__(self, path: str, signature: str = "serving_default") -> None:
        self.model = tf.saved_model.load(path)
        self.function = self.model.signatures[signature]
        self.input_specs = self.function.structured_input_signature[1]

    def predict(self, instances: list[Any]) -> list[Any]:
        """Rows in (``instances``), rows out (``predictions``)."""
        if instances and isinstance(instances[0], dict):
            columns = {name: [row[name] for row in instances] for name in self.input_specs}
        else:
            (name,) = self.input_specs
            columns = {name: instances}
        feeds = {name: tf.constant(np.asarray(values, dtype=self.input_specs[name].dtype.as_numpy_dtype))
                 for name, values in columns.items()}
        outputs = {name: tensor.numpy() for name, tensor in self.function(**feeds).items()}
        if len(outputs) == 1:
            return next(iter(outputs.values())).tolist()
        lists = {name: array.tolist() for name, array in outputs.items()}
        return [{name: rows[i] for name, rows in lists.items()} for i in range(len(next(iter(lists.values()))))]
