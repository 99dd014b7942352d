"""The SDK's exceptions: ``serving.status``'s tree, the same over gRPC and REST.

Every failed call raises a ``ServingError`` subclass carrying ``.code`` (a
``Code``) and ``.details`` (the server's message), chained (``__cause__``)
from the transport's exception; no ``grpc.RpcError`` or ``httpx`` error
escapes the SDK.
"""
from serving.status import (
    Aborted,
    AlreadyExists,
    Cancelled,
    Code,
    DataLoss,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    ServingError,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    Unknown,
    error_for,
)

__all__ = [
    "Code",
    "ServingError",
    "Cancelled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
    "error_for",
]
