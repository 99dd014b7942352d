"""One error taxonomy for the whole stack, mapped once per edge.

Inside, every failure is a canonical code (the absl/TF ``error::Code`` set,
numerically equal to gRPC's status codes). Exactly one function maps a code to
an HTTP status (``to_http_status``, TF Serving ``http_server.cc``
``ToHTTPStatusCode``) and one to a gRPC status (``to_grpc_status``, TF Serving
``grpc_status_util.cc``, which copies the code numerically). The reverse maps
serve the client SDK, so the same server condition raises the same exception
over gRPC and REST.

``ServingError`` and its subclasses are raised by the server's data plane and
by the client SDK alike. Each carries ``.code`` (a ``Code``) and ``.details``
(the server's message).

A failure that is the server's own fault (a Python exception, not a status)
leaves through ``internal_error(what, cause, log)``: the client gets INTERNAL
saying what failed and a request id, never a Python class or message; the
exception, with its traceback, goes to the server log under the same id.
"""
from __future__ import annotations

import enum
import logging
import uuid
from typing import Optional

import grpc

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
    "internal_error",
    "to_http_status",
    "from_http_status",
    "to_grpc_status",
    "from_grpc_status",
    "truncate_for_grpc",
]


class Code(enum.IntEnum):
    """Canonical status codes; values equal gRPC's and absl's."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class ServingError(Exception):
    """A failed call: a canonical ``code`` and the server's ``details``."""

    code: Code = Code.UNKNOWN

    def __init__(self, details: str = "", *, code: Optional[Code] = None) -> None:
        super().__init__(details)
        if code is not None:
            self.code = Code(code)
        self.details = details

    def __str__(self) -> str:
        return f"{self.code.name}: {self.details}"


class Cancelled(ServingError):
    """CANCELLED: The call was cancelled, usually by its caller (a client that went away, a drain that ran out of
    grace).
    """

    code = Code.CANCELLED


class Unknown(ServingError):
    """UNKNOWN: An error with no better code: a status whose code this stack does not know."""

    code = Code.UNKNOWN


class InvalidArgument(ServingError):
    """INVALID_ARGUMENT: The request is wrong whatever the server's state: a malformed body, a missing input, a bad
    dtype or shape.
    """

    code = Code.INVALID_ARGUMENT


class DeadlineExceeded(ServingError):
    """DEADLINE_EXCEEDED: The call's deadline passed before it was answered (the client's, or
    ``--rest_api_timeout_in_ms``).
    """

    code = Code.DEADLINE_EXCEEDED


class NotFound(ServingError):
    """NOT_FOUND: The model, version, label or signature named does not exist (or is not loaded)."""

    code = Code.NOT_FOUND


class AlreadyExists(ServingError):
    """ALREADY_EXISTS: What the call would create exists already."""

    code = Code.ALREADY_EXISTS


class PermissionDenied(ServingError):
    """PERMISSION_DENIED: The caller is known but may not do this (an API key without the right)."""

    code = Code.PERMISSION_DENIED


class ResourceExhausted(ServingError):
    """RESOURCE_EXHAUSTED: A bound was reached: concurrent calls, body or message size, memory, a batching queue."""

    code = Code.RESOURCE_EXHAUSTED


class FailedPrecondition(ServingError):
    """FAILED_PRECONDITION: The server is not in the state the call needs (a version not yet available, a label on a
    version not loaded).
    """

    code = Code.FAILED_PRECONDITION


class Aborted(ServingError):
    """ABORTED: The call was aborted by a conflict (a compare-and-swap that lost the race); it may be retried from the
    start.
    """

    code = Code.ABORTED


class OutOfRange(ServingError):
    """OUT_OF_RANGE: A value is past the range it may take."""

    code = Code.OUT_OF_RANGE


class Unimplemented(ServingError):
    """UNIMPLEMENTED: The method or feature is not served here."""

    code = Code.UNIMPLEMENTED


class Internal(ServingError):
    """INTERNAL: The server's own fault; ``details`` names a request id (``request_id``) and the log has the traceback.
    """

    code = Code.INTERNAL

    request_id: Optional[str] = None   # set by ``internal_error``: the id the server log names


class Unavailable(ServingError):
    """UNAVAILABLE: The server cannot take the call now (starting, draining, unreachable); a retry elsewhere or later
    may succeed.
    """

    code = Code.UNAVAILABLE


class DataLoss(ServingError):
    """DATA_LOSS: Unrecoverable loss or corruption of data."""

    code = Code.DATA_LOSS


class Unauthenticated(ServingError):
    """UNAUTHENTICATED: The call carries no valid credentials (a missing or wrong API key)."""

    code = Code.UNAUTHENTICATED


_BY_CODE = {cls.code: cls for cls in (
    Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
    PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
    Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated)}


def error_for(code: Code | int, details: str) -> ServingError:
    """The exception of the subclass that owns ``code``."""
    code = Code(code)
    cls = _BY_CODE.get(code, ServingError)
    return cls(details, code=code)


def internal_error(what: str, cause: BaseException, log: logging.Logger) -> ServingError:
    """``Internal("<what> (request id <id>); see the server log")``; ``cause`` is logged under that id.

    ``what`` says what failed in the server's words (``"Internal error while
    running the model"``); the client never sees ``cause``'s class or message.
    The error's ``.request_id`` is the id.
    """
    request_id = uuid.uuid4().hex[:16]
    log.error("%s (request id %s)", what, request_id, exc_info=cause, extra={"request_id": request_id})
    error = Internal(f"{what} (request id {request_id}); see the server log")
    error.request_id = request_id
    return error


# TF Serving http_server.cc ToHTTPStatusCode.
_HTTP = {
    Code.OK: 200,
    Code.CANCELLED: 499,
    Code.UNKNOWN: 500,
    Code.INVALID_ARGUMENT: 400,
    Code.DEADLINE_EXCEEDED: 504,
    Code.NOT_FOUND: 404,
    Code.ALREADY_EXISTS: 409,
    Code.PERMISSION_DENIED: 403,
    Code.RESOURCE_EXHAUSTED: 429,
    Code.FAILED_PRECONDITION: 400,
    Code.ABORTED: 409,
    Code.OUT_OF_RANGE: 400,
    Code.UNIMPLEMENTED: 501,
    Code.INTERNAL: 500,
    Code.UNAVAILABLE: 503,
    Code.DATA_LOSS: 500,
    Code.UNAUTHENTICATED: 401,
}

# HTTP statuses several codes share decode to the most common of them.
_FROM_HTTP = {
    400: Code.INVALID_ARGUMENT,
    401: Code.UNAUTHENTICATED,
    403: Code.PERMISSION_DENIED,
    404: Code.NOT_FOUND,
    408: Code.DEADLINE_EXCEEDED,
    409: Code.ABORTED,
    413: Code.RESOURCE_EXHAUSTED,  # a gateway's body limit (TF Serving itself never sends 413)
    429: Code.RESOURCE_EXHAUSTED,
    499: Code.CANCELLED,
    500: Code.INTERNAL,
    501: Code.UNIMPLEMENTED,
    502: Code.UNAVAILABLE,
    503: Code.UNAVAILABLE,
    504: Code.DEADLINE_EXCEEDED,
}


def to_http_status(code: Code | int) -> int:
    """HTTP status for a canonical code, as TF Serving's REST server maps it."""
    return _HTTP.get(Code(code), 500)


def from_http_status(status: int) -> Code:
    """Best canonical code for an HTTP status (used by the REST client)."""
    if 200 <= status < 300:
        return Code.OK
    return _FROM_HTTP.get(status, Code.UNKNOWN)


_GRPC_BY_VALUE: dict[int, grpc.StatusCode] = {sc.value[0]: sc for sc in grpc.StatusCode}


def to_grpc_status(code: Code | int) -> grpc.StatusCode:
    """The ``grpc.StatusCode`` with the same number (TF Serving ``ToGRPCStatus``)."""
    return _GRPC_BY_VALUE[int(code)]


def from_grpc_status(status: grpc.StatusCode) -> Code:
    """Canonical code for a ``grpc.StatusCode``."""
    return Code(status.value[0])


_GRPC_MESSAGE_LIMIT = 1024


def truncate_for_grpc(message: str) -> str:
    """TF Serving truncates gRPC error messages to 1024 chars plus a marker."""
    if len(message) <= _GRPC_MESSAGE_LIMIT:
        return message
    return message[:_GRPC_MESSAGE_LIMIT] + "...TRUNCATED"
