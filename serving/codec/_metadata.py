"""A model's metadata and its versions' states: the one type of each for the server, the SDK and the tests.

``ModelMetadata`` is a ``GetModelMetadata`` answer: the version that answered
and its signatures, decoded into ``Signature``s; ``signature_defs`` keeps the
protos they were decoded from (the server's front-ends pack the servable's own
protos, so they send what TF Serving sends). ``VersionStatus`` is one entry of
``GetModelStatus``; its ``state`` is a ``VersionState``, the proto's
``ModelVersionStatus.State``: a ``str`` enum whose value is the state's name
(``VersionState.AVAILABLE == "AVAILABLE"``), with the proto's number in
``.number``. Nothing here imports TensorFlow.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Mapping, Optional

from serving.codec._signature import Signature, SignatureDefProto
from serving.status import Code
from serving.wire import serving_apis_pb2 as apis

__all__ = ["VersionState", "VersionStatus", "ModelMetadata"]


class VersionState(str, enum.Enum):
    """``ModelVersionStatus.State`` (``get_model_status.proto``): name as value, proto number as ``.number``.

    A version is START when the manager first aspires it, LOADING while its
    loader runs (retries included), AVAILABLE while it serves, UNLOADING while
    it drains, and END once unloaded or when its load failed (then
    ``VersionStatus.error_code`` is not OK).
    """

    UNKNOWN = "UNKNOWN"
    START = "START"
    LOADING = "LOADING"
    AVAILABLE = "AVAILABLE"
    UNLOADING = "UNLOADING"
    END = "END"

    def __str__(self) -> str:
        return self.value

    def __format__(self, format_spec: str) -> str:
        return format(self.value, format_spec)

    @property
    def number(self) -> int:
        """The proto's enum number (AVAILABLE is 30)."""
        return _STATE_NUMBERS[self]

    @classmethod
    def from_number(cls, number: int) -> "VersionState":
        """The state of a proto enum number; UNKNOWN for a number the proto does not define."""
        return _STATES_BY_NUMBER.get(int(number), cls.UNKNOWN)


_STATE_NUMBERS = {VersionState.UNKNOWN: 0, VersionState.START: 10, VersionState.LOADING: 20,
                  VersionState.AVAILABLE: 30, VersionState.UNLOADING: 40, VersionState.END: 50}
_STATES_BY_NUMBER = {number: state for state, number in _STATE_NUMBERS.items()}


@dataclass(frozen=True)
class VersionStatus:
    """One entry of ``GetModelStatus``: a version, its state and its status.

    ``state`` may be given as a ``VersionState``, its name or its proto number.
    """

    version: int
    state: VersionState
    error_code: Code = Code.OK
    error_message: str = ""

    def __post_init__(self) -> None:
        state = self.state
        if not isinstance(state, VersionState):
            state = VersionState.from_number(state) if isinstance(state, int) else VersionState(state)
        object.__setattr__(self, "state", state)
        object.__setattr__(self, "error_code", Code(self.error_code))

    @classmethod
    def from_wire(cls, entry: apis.ModelVersionStatus) -> "VersionStatus":
        return cls(int(entry.version), VersionState.from_number(entry.state), Code(entry.status.error_code),
                   entry.status.error_message)


@dataclass(frozen=True)
class ModelMetadata:
    """``GetModelMetadata``'s answer: the model, the version that answered and its signatures by key.

    ``signature_defs`` holds the ``SignatureDef`` protos (official or wire) the
    signatures were decoded from; it takes no part in equality, so answers
    decoded from gRPC and REST compare equal.
    """

    model: str
    version: Optional[int]
    signatures: Mapping[str, Signature]
    signature_defs: Mapping[str, SignatureDefProto] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_signature_defs(cls, model: str, version: Optional[int],
                            signature_defs: Mapping[str, SignatureDefProto]) -> "ModelMetadata":
        """The metadata of ``signature_defs`` (keys sorted), keeping the protos."""
        defs = {key: signature_defs[key] for key in sorted(signature_defs)}
        return cls(model, version, {key: Signature.from_signature_def(key, proto) for key, proto in defs.items()},
                   defs)

    @classmethod
    def from_wire(cls, model_spec: apis.ModelSpec, signature_def_map: apis.SignatureDefMap) -> "ModelMetadata":
        """The metadata of a ``GetModelMetadataResponse``'s model spec and unpacked ``SignatureDefMap``."""
        version = model_spec.version.value if model_spec.HasField("version") else None
        return cls.from_signature_defs(model_spec.name, version, signature_def_map.signature_def)
