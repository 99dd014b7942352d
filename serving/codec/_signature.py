"""Signatures and their tensors: the one vocabulary of the server, the SDK and the exporter.

A ``Signature`` is what a ``SignatureDef`` says: its method name and its
input and output ``TensorSpec``s by alias. ``Signature.from_signature_def``
and ``TensorSpec.from_tensor_info`` are the one decoder of the protos
(duck-typed: the official ``tensorflow.SignatureDef``/``TensorInfo`` and the
SDK's ``serving.wire`` ones); ``to_json``/``from_json`` are the exporter's
manifest records of them (TF dtype names, -1 for an unknown dimension).

``DEFAULT_SIGNATURE`` and the method names are TensorFlow's
``signature_constants``. Nothing here imports TensorFlow.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Protocol, Sequence, cast

import numpy as np

from serving.codec._dtypes import dtype_from_enum, dtype_from_name, enum_from_dtype
from serving.codec._json import JSON
from serving.wire.serving_apis_pb2 import DataType

__all__ = [
    "DEFAULT_SIGNATURE",
    "PREDICT_METHOD_NAME",
    "CLASSIFY_METHOD_NAME",
    "REGRESS_METHOD_NAME",
    "Shape",
    "TensorInfoProto",
    "SignatureDefProto",
    "TensorSpec",
    "Signature",
]

DEFAULT_SIGNATURE = "serving_default"
"""The signature an empty or absent signature name means (``DEFAULT_SERVING_SIGNATURE_DEF_KEY``)."""
PREDICT_METHOD_NAME = "tensorflow/serving/predict"
CLASSIFY_METHOD_NAME = "tensorflow/serving/classify"
REGRESS_METHOD_NAME = "tensorflow/serving/regress"

Shape = Optional[tuple[Optional[int], ...]]
"""A tensor's shape: None for an unknown dimension; None itself for an unknown rank."""

_UNKNOWN_DTYPE_NAME = re.compile(r"DataType (\d+)")


class _DimProto(Protocol):
    size: int


class _TensorShapeProto(Protocol):
    unknown_rank: bool

    @property
    def dim(self) -> Iterable[_DimProto]: ...


class TensorInfoProto(Protocol):
    """What the decoder reads of a ``TensorInfo`` (official or ``serving.wire``)."""

    name: str
    dtype: int

    @property
    def tensor_shape(self) -> _TensorShapeProto: ...

    def HasField(self, field_name: str) -> bool: ...


class SignatureDefProto(Protocol):
    """What the decoder reads of a ``SignatureDef`` (official or ``serving.wire``)."""

    method_name: str

    @property
    def inputs(self) -> Mapping[str, TensorInfoProto]: ...

    @property
    def outputs(self) -> Mapping[str, TensorInfoProto]: ...


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a signature.

    ``dtype`` is a numpy dtype: ``object`` for DT_STRING, and also for a
    DataType the codec's dtype table lacks (DT_INVALID, DT_RESOURCE,
    DT_COMPLEX64, ...; ``dtype_supported`` is False then and the wire cannot
    carry the tensor). ``dtype_name`` tells them apart: it is TensorFlow's
    name of ``dtype_enum`` either way. The ``__saved_model_init_op``
    signature's output (a graph op, no tensor) is DT_INVALID on both of TF
    Serving's wires: gRPC leaves ``TensorInfo.dtype`` at its default 0, REST
    metadata prints ``"dtype": "DT_INVALID"``; both decode to this same spec.
    ``shape`` uses None for an unknown (-1) dimension and is None itself for
    an unknown rank. ``tensor_name`` is the graph tensor
    (``"serving_default_x:0"``). ``dtype_enum`` is the TF ``DataType`` number;
    left out, it is the one of ``dtype``.
    """

    name: str
    dtype: np.dtype
    shape: Shape
    tensor_name: str = ""
    dtype_enum: Optional[int] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        if self.shape is not None:
            object.__setattr__(self, "shape", tuple(None if d is None else int(d) for d in self.shape))
        if self.dtype_enum is None:
            object.__setattr__(self, "dtype_enum", enum_from_dtype(self.dtype).enum)

    @classmethod
    def from_tensor_info(cls, name: str, info: TensorInfoProto) -> "TensorSpec":
        """The spec of a ``TensorInfo`` proto. A missing ``tensor_shape`` is an unknown rank."""
        try:
            dtype = dtype_from_enum(info.dtype).numpy
        except ValueError:
            dtype = np.dtype(object)  # a dtype the wire cannot carry; inference rejects it
        shape: Shape = None
        if info.HasField("tensor_shape") and not info.tensor_shape.unknown_rank:
            shape = tuple(None if d.size < 0 else int(d.size) for d in info.tensor_shape.dim)
        return cls(name, dtype, shape, info.name, int(info.dtype))

    @property
    def _enum(self) -> int:
        """``dtype_enum``: an argument may leave it out (None), ``__post_init__`` always sets it."""
        return cast(int, self.dtype_enum)   # set by __post_init__

    @property
    def dtype_supported(self) -> bool:
        """True if the codec's dtype table has ``dtype_enum`` (``dtype`` is then exact)."""
        try:
            dtype_from_enum(self._enum)
        except ValueError:
            return False
        return True

    @property
    def dtype_name(self) -> str:
        """TensorFlow's name of the dtype: ``"DT_FLOAT"``, ``"DT_INVALID"``; ``"DataType N"`` for a number TF lacks."""
        try:
            return dtype_from_enum(self._enum).name
        except ValueError:
            pass
        try:
            return DataType.Name(self.dtype_enum)
        except ValueError:
            return f"DataType {self.dtype_enum}"

    @property
    def dims(self) -> Optional[tuple[int, ...]]:
        """The shape as ``TensorShapeProto`` and ``saved_model_cli`` write it: -1 for an unknown dimension."""
        return None if self.shape is None else tuple(-1 if d is None else d for d in self.shape)

    def accepts_shape(self, shape: Sequence[int]) -> bool:
        """True if a tensor of ``shape`` fits: same rank, equal wherever this spec's dimension is known."""
        if self.shape is None:
            return True
        return len(self.shape) == len(shape) and all(e is None or e == a for e, a in zip(self.shape, shape))

    def to_json(self) -> dict[str, JSON]:
        """The manifest record: ``{"dtype": "DT_FLOAT", "shape": [-1, 8] or null, "tensor_name": ...}``."""
        dims = self.dims
        return {"dtype": self.dtype_name, "shape": None if dims is None else list(dims),
                "tensor_name": self.tensor_name}

    @classmethod
    def from_json(cls, name: str, doc: Mapping[str, JSON]) -> "TensorSpec":
        """The spec a manifest record describes (inverse of ``to_json``); ValueError for an unknown dtype name,
        TypeError for a field of the wrong JSON type."""
        dtype_name, tensor_name = doc["dtype"], doc["tensor_name"]
        if not isinstance(dtype_name, str) or not isinstance(tensor_name, str):
            raise TypeError(f"tensor {name!r}: 'dtype' and 'tensor_name' must be strings, not "
                            f"{type(dtype_name).__name__} and {type(tensor_name).__name__}")
        enum = _dtype_enum_from_name(dtype_name)
        try:
            dtype = dtype_from_enum(enum).numpy
        except ValueError:
            dtype = np.dtype(object)
        return cls(name, dtype, _shape_from_json(name, doc["shape"]), tensor_name, enum)


def _shape_from_json(name: str, dims: JSON) -> Shape:
    """A manifest record's ``shape``: null (unknown rank) or a list of dimensions, -1 for an unknown one."""
    if dims is None:
        return None
    if not isinstance(dims, list):
        raise TypeError(f"tensor {name!r}: 'shape' must be null or a list of numbers, not {type(dims).__name__}")
    shape: list[Optional[int]] = []
    for d in dims:
        if not isinstance(d, (int, float)):
            raise TypeError(f"tensor {name!r}: 'shape' must be null or a list of numbers, not a {type(d).__name__}")
        shape.append(None if d < 0 else int(d))
    return tuple(shape)


def _dtype_enum_from_name(name: str) -> int:
    match = _UNKNOWN_DTYPE_NAME.fullmatch(name)
    if match:
        return int(match.group(1))
    try:
        return dtype_from_name(name).enum
    except ValueError:
        if name in DataType.keys():
            return DataType.Value(name)
        raise


@dataclass(frozen=True)
class Signature:
    """A SignatureDef: ``method_name`` and its inputs/outputs by alias."""

    name: str
    method_name: str
    inputs: Mapping[str, TensorSpec]
    outputs: Mapping[str, TensorSpec]

    @classmethod
    def from_signature_def(cls, name: str, signature_def: SignatureDefProto) -> "Signature":
        """The signature a ``SignatureDef`` proto declares under key ``name`` (aliases sorted)."""
        return cls(name, signature_def.method_name,
                   _specs(signature_def.inputs), _specs(signature_def.outputs))

    def to_json(self) -> dict[str, JSON]:
        """The manifest record: ``{"method_name": ..., "inputs": {...}, "outputs": {...}}``."""
        return {"method_name": self.method_name,
                "inputs": {k: t.to_json() for k, t in self.inputs.items()},
                "outputs": {k: t.to_json() for k, t in self.outputs.items()}}

    @classmethod
    def from_json(cls, name: str, doc: Mapping[str, JSON]) -> "Signature":
        """The signature a manifest record describes (inverse of ``to_json``); TypeError for a field of the wrong
        JSON type."""
        method_name = doc["method_name"]
        if not isinstance(method_name, str):
            raise TypeError(f"signature {name!r}: 'method_name' must be a string, not {type(method_name).__name__}")
        return cls(name, method_name, _specs_from_json(name, doc["inputs"]), _specs_from_json(name, doc["outputs"]))


def _specs_from_json(signature: str, tensors: JSON) -> dict[str, TensorSpec]:
    """A manifest record's ``inputs`` or ``outputs``: an object of tensor records by alias."""
    if not isinstance(tensors, dict):
        raise TypeError(f"signature {signature!r}: 'inputs' and 'outputs' must be objects, not {type(tensors).__name__}")
    specs = {}
    for key, record in tensors.items():
        if not isinstance(record, dict):
            raise TypeError(f"signature {signature!r}: tensor {key!r} must be an object, not {type(record).__name__}")
        specs[key] = TensorSpec.from_json(key, record)
    return specs


def _specs(infos: Mapping[str, TensorInfoProto]) -> dict[str, TensorSpec]:
    return {key: TensorSpec.from_tensor_info(key, infos[key]) for key in sorted(infos)}
