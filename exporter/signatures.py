"""Signatures of a SavedModel: read them back, describe them, build their example inputs.

TF Serving serves SignatureDefs, not Python functions, so everything the
exporter records or validates is read from the saved ``saved_model.pb``
(the ``serve`` meta graph), exactly what ``saved_model_cli show`` prints.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence, Union

import numpy as np

from exporter.manifest import SignatureInfo, TensorInfo
from serving.codec import dtype_from_enum, example_from_dict

__all__ = [
    "SERVING_DEFAULT",
    "read_signature_defs",
    "describe_signatures",
    "serialize_examples",
]

SERVING_DEFAULT = "serving_default"
_INIT_OP_KEY = "__saved_model_init_op"


def read_signature_defs(saved_model_dir: Union[str, Path], tag: str = "serve") -> dict[str, Any]:
    """The ``SignatureDef`` protos of the meta graph tagged ``tag``, by key."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((Path(saved_model_dir) / "saved_model.pb").read_bytes())
    for meta_graph in saved_model.meta_graphs:
        if tag in meta_graph.meta_info_def.tags:
            return {k: v for k, v in meta_graph.signature_def.items() if k != _INIT_OP_KEY}
    raise ValueError(f"{saved_model_dir} has no meta graph tagged {tag!r}")


def _tensor_info(key: str, proto: Any) -> TensorInfo:
    shape = None if proto.tensor_shape.unknown_rank else tuple(int(d.size) for d in proto.tensor_shape.dim)
    return TensorInfo(key=key, dtype=dtype_from_enum(proto.dtype).name, shape=shape, tensor_name=proto.name)


def describe_signatures(saved_model_dir: Union[str, Path]) -> dict[str, SignatureInfo]:
    """Every signature of a SavedModel as manifest records (sorted keys)."""
    infos = {}
    for name, sig in sorted(read_signature_defs(saved_model_dir).items()):
        infos[name] = SignatureInfo(
            name=name, method_name=sig.method_name,
            inputs={k: _tensor_info(k, v) for k, v in sorted(sig.inputs.items())},
            outputs={k: _tensor_info(k, v) for k, v in sorted(sig.outputs.items())})
    return infos


def serialize_examples(rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """Serialized ``tf.train.Example`` protos (an object array of bytes), one per row.

    Built with the codec's ``example_from_dict`` (TF Serving's rules: floats
    to ``float_list``, integers to ``int64_list``, str/bytes to
    ``bytes_list``), the layout ``tf.io.parse_example`` and Classify/Regress expect.
    """
    from tensorflow.core.example import example_pb2

    out = np.empty(len(rows), dtype=object)
    out[:] = [example_from_dict(row, example_pb2.Example()).SerializeToString() for row in rows]
    return out
