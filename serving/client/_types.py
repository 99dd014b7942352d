"""What the SDK returns besides numpy arrays: model metadata and version status.

Built from wire messages (any message with TF Serving's field names), so
gRPC and REST answers turn into equal values.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np

from serving import codec
from serving.status import Code

__all__ = ["TensorSpec", "Signature", "ModelMetadata", "VersionStatus"]


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a signature.

    ``dtype`` is None for dtypes the codec does not carry (e.g. DT_RESOURCE);
    ``shape`` is None for unknown rank, with None for each unknown dimension.
    """

    name: str
    dtype: Optional[np.dtype]
    shape: Optional[tuple[Optional[int], ...]]
    tensor_name: str

    @classmethod
    def from_tensor_info(cls, name: str, info: Any) -> "TensorSpec":
        try:
            dtype: Optional[np.dtype] = codec.dtype_from_enum(info.dtype).numpy
        except ValueError:
            dtype = None
        shape = None
        if info.HasField("tensor_shape") and not info.tensor_shape.unknown_rank:
            shape = tuple(None if d.size < 0 else int(d.size) for d in info.tensor_shape.dim)
        return cls(name, dtype, shape, info.name)


@dataclass(frozen=True)
class Signature:
    """A SignatureDef: its method and named tensors."""

    name: str
    method_name: str
    inputs: Mapping[str, TensorSpec]
    outputs: Mapping[str, TensorSpec]

    @classmethod
    def from_signature_def(cls, name: str, signature_def: Any) -> "Signature":
        def specs(entries: Any) -> dict[str, TensorSpec]:
            return {key: TensorSpec.from_tensor_info(key, entries[key]) for key in sorted(entries)}
        return cls(name, signature_def.method_name, specs(signature_def.inputs), specs(signature_def.outputs))


@dataclass(frozen=True)
class ModelMetadata:
    """``GetModelMetadata``'s answer: the version served and its signatures by key."""

    model: str
    version: Optional[int]
    signatures: Mapping[str, Signature]

    @classmethod
    def from_wire(cls, model_spec: Any, signature_def_map: Any) -> "ModelMetadata":
        version = model_spec.version.value if model_spec.HasField("version") else None
        defs = signature_def_map.signature_def
        return cls(model_spec.name, version,
                   {key: Signature.from_signature_def(key, defs[key]) for key in sorted(defs)})


@dataclass(frozen=True)
class VersionStatus:
    """One entry of ``GetModelStatus``: a version, its state name and its status."""

    version: int
    state: str
    error_code: Code
    error_message: str

    @classmethod
    def from_wire(cls, entry: Any) -> "VersionStatus":
        state = type(entry).State.Name(entry.state) if entry.state in type(entry).State.values() else str(entry.state)
        return cls(int(entry.version), state, Code(entry.status.error_code), entry.status.error_message)
