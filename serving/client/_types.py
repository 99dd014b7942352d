"""What the SDK returns besides numpy arrays: model metadata and version status.

Built from the SDK's wire messages (``serving.wire``; REST answers are parsed
into the same messages), so gRPC and REST answers turn into equal values.
``TensorSpec`` and ``Signature`` are ``serving.codec``'s, shared with the
server and the exporter, and re-exported here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from serving.codec import Signature, TensorSpec
from serving.status import Code
from serving.wire import serving_apis_pb2 as apis

__all__ = ["TensorSpec", "Signature", "ModelMetadata", "VersionStatus"]


@dataclass(frozen=True)
class ModelMetadata:
    """``GetModelMetadata``'s answer: the version served and its signatures by key."""

    model: str
    version: Optional[int]
    signatures: Mapping[str, Signature]

    @classmethod
    def from_wire(cls, model_spec: apis.ModelSpec, signature_def_map: apis.SignatureDefMap) -> "ModelMetadata":
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
    def from_wire(cls, entry: apis.ModelVersionStatus) -> "VersionStatus":
        states = apis.ModelVersionStatus.State
        state = states.Name(entry.state) if entry.state in states.values() else str(entry.state)
        return cls(int(entry.version), state, Code(entry.status.error_code), entry.status.error_message)
