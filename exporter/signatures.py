"""Signatures of a SavedModel: read them back, describe them, build their example inputs.

TF Serving serves SignatureDefs, not Python functions, so everything the
exporter records or validates is read from the saved ``saved_model.pb``
(the ``serve`` meta graph), exactly what ``saved_model_cli show`` prints,
and decoded into ``serving.codec``'s ``Signature``/``TensorSpec``.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence, Union

import numpy as np

from serving.codec import Features, Signature, example_from_dict

if TYPE_CHECKING:  # annotations only: importing this module loads no TensorFlow
    from tensorflow.core.protobuf import meta_graph_pb2

__all__ = [
    "read_signature_defs",
    "describe_signatures",
    "serialize_examples",
]

_INIT_OP_KEY = "__saved_model_init_op"


def read_signature_defs(saved_model_dir: Union[str, Path],
                        tag: str = "serve") -> dict[str, "meta_graph_pb2.SignatureDef"]:
    """The ``SignatureDef`` protos of the meta graph tagged ``tag``, by key."""
    from tensorflow.core.protobuf import saved_model_pb2  # TensorFlow: only when a SavedModel is read

    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((Path(saved_model_dir) / "saved_model.pb").read_bytes())
    for meta_graph in saved_model.meta_graphs:
        if tag in meta_graph.meta_info_def.tags:
            return {k: v for k, v in meta_graph.signature_def.items() if k != _INIT_OP_KEY}
    raise ValueError(f"{saved_model_dir} has no meta graph tagged {tag!r}")


def describe_signatures(saved_model_dir: Union[str, Path]) -> dict[str, Signature]:
    """Every signature of a SavedModel (sorted keys), as the manifest records them."""
    return {name: Signature.from_signature_def(name, sig)
            for name, sig in sorted(read_signature_defs(saved_model_dir).items())}


def serialize_examples(rows: Sequence[Features]) -> np.ndarray:
    """Serialized ``tf.train.Example`` protos (an object array of bytes), one per row.

    Built with the codec's ``example_from_dict`` (TF Serving's rules: floats
    to ``float_list``, integers to ``int64_list``, str/bytes to
    ``bytes_list``), the layout ``tf.io.parse_example`` and Classify/Regress expect.
    """
    from tensorflow.core.example import example_pb2  # TensorFlow: only when examples are built

    out = np.empty(len(rows), dtype=object)
    out[:] = [example_from_dict(row, example_pb2.Example()).SerializeToString() for row in rows]
    return out
