"""The SDK's exceptions: ``serving.status``'s tree, the same over gRPC and REST.

Every failed call raises a ``ServingError`` subclass carrying ``.code`` (a
``Code``) and ``.details`` (the server's message), chained (``__cause__``)
from the transport's exception; no ``grpc.RpcError`` or ``httpx`` error
escapes the SDK.

``TlsError`` is the SDK's own: the TLS handshake failed (an untrusted or
misnamed server certificate, a client certificate missing or refused, a
server that does not speak TLS). Its code is UNAVAILABLE, as gRPC reports
it, but it is not an ``Unavailable``: it is never retried, since retrying
cannot fix it. ``Unauthenticated`` and ``PermissionDenied`` (a missing,
wrong or insufficient API key) are never retried either.

``ResponseTooLarge`` is the SDK's own too: the server's answer passed the
client's ``max_response_bytes`` (after decompression, or decoded tensors);
a ``ResourceExhausted``, never retried by default.
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
    "TlsError",
    "ResponseTooLarge",
    "error_for",
]


class TlsError(ServingError):
    """The TLS handshake failed; ``details`` says which side refused what. Never retried."""

    code = Code.UNAVAILABLE


class ResponseTooLarge(ResourceExhausted):
    """The answer passed the client's ``max_response_bytes``; ``details`` names the limit. Never retried."""
