"""The synchronous gRPC client, and the channel settings both gRPC clients share."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import grpc

from serving import status
from serving.client._api import SyncTransport
from serving.client._grpc_protocol import GrpcProtocol, RpcStatus, error_from_rpc
from serving.client._protocol import Call
from serving.client._security import PemSource, TlsConfig, auth_metadata, grpc_tls_error, redact
from serving.client.errors import ResponseTooLarge, TlsError
from serving.client.retry import RetryPolicy

__all__ = ["GrpcClient", "ChannelPlan", "ChannelOption", "channel_options", "DEFAULT_TIMEOUT", "MAX_MESSAGE_BYTES",
           "DEFAULT_MAX_RESPONSE_BYTES"]

DEFAULT_TIMEOUT = 30.0
# TF Serving's server accepts int32-max messages; gRPC clients default to 4 MiB (TF Serving #1382).
MAX_MESSAGE_BYTES = 2**31 - 1
# The largest answer a client accepts, after decompression, unless told otherwise: an answer bigger than
# this is refused (errors.ResponseTooLarge) before it is held in memory.
DEFAULT_MAX_RESPONSE_BYTES = 64 * 2**20

ChannelOption = tuple[str, Union[int, str]]
"""One gRPC channel argument: ``("grpc.max_receive_message_length", 1024)``."""


def channel_options(max_message_bytes: int, extra: Sequence[ChannelOption] = (), *,
                    max_receive_bytes: Optional[int] = None) -> list[ChannelOption]:
    """Channel arguments: the send limit, the receive limit (``max_receive_bytes``, else the send
    limit), then ``extra``."""
    return [("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_receive_bytes or max_message_bytes), *extra]


@dataclass(frozen=True)
class ChannelPlan:
    """What a gRPC client's channel and calls carry: credentials, options, per-call metadata.

    ``credentials`` is None for a plaintext channel; ``metadata`` (the API key
    or bearer token first) goes with every call.
    """

    target: str
    credentials: Optional[grpc.ChannelCredentials]
    options: list[ChannelOption]
    metadata: tuple[tuple[str, str], ...] = field(repr=False)  # holds the credentials
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    tls_for_credentials: bool = False

    @classmethod
    def build(cls, target: str, *, root_certificates: Optional[PemSource], client_cert: Optional[PemSource],
              client_key: Optional[PemSource], server_name: Optional[str], api_key: Optional[str],
              bearer_token: Optional[str], credentials: Optional[grpc.ChannelCredentials],
              max_message_bytes: int, options: Sequence[ChannelOption],
              metadata: Sequence[tuple[str, str]], insecure: bool = False,
              max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> "ChannelPlan":
        tls = TlsConfig.from_args(root_certificates, client_cert, client_key, server_name)
        if tls is not None and credentials is not None:
            raise ValueError("give credentials= or the TLS arguments (root_certificates, client_cert, "
                             "client_key, server_name), not both")
        if insecure and (tls is not None or credentials is not None):
            raise ValueError("insecure=True asks for a plaintext channel; the TLS arguments (root_certificates, "
                             "client_cert, client_key, server_name, credentials) ask for TLS: give one or the other")
        auth = auth_metadata(api_key, bearer_token)
        implied = bool(auth) and tls is None and credentials is None and not insecure
        if implied:   # a credential never travels in plaintext unless asked: TLS with the system's CAs
            tls = TlsConfig()
        if max_response_bytes < 1:
            raise ValueError("max_response_bytes must be at least 1")
        return cls(target,
                   credentials if tls is None else tls.grpc_credentials(),
                   channel_options(max_message_bytes, [*(tls.grpc_options() if tls else []), *options],
                                   max_receive_bytes=max_response_bytes),
                   (*auth, *metadata), max_response_bytes, implied)

    def error(self, exc: RpcStatus) -> status.ServingError:
        """The SDK exception for a failed call: ``TlsError`` for a failed handshake, ``ResponseTooLarge``
        for an answer past ``max_response_bytes``; credentials never appear in the text."""
        details = redact(exc.details() or "", [value for _, value in self.metadata])
        tls_error = grpc_tls_error(exc.code(), details, self.target) if self.credentials else None
        if tls_error is not None:
            return tls_error if not self.tls_for_credentials else TlsError(
                f"{tls_error.details} TLS is on because a credential was given without TLS arguments; "
                "pass insecure=True (CLI --insecure) to send it in plaintext")
        # grpc core tags a receive limit with the side that hit it: "SERVER: ..." is the server refusing
        # the request, not this client refusing the answer.
        if (exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "Received message larger than max" in details
                and not details.startswith("SERVER:")):
            return ResponseTooLarge(f"the answer is larger than max_response_bytes={self.max_response_bytes} "
                                    f"bytes ({details})")
        return error_from_rpc(_Details(exc.code(), details))


@dataclass(frozen=True)
class _Details:
    """A failed call's code and (redacted) details, as ``error_from_rpc`` reads them."""

    status_code: grpc.StatusCode
    text: str

    def code(self) -> grpc.StatusCode:
        return self.status_code

    def details(self) -> str:
        return self.text


class GrpcClient(SyncTransport):
    """TF Serving over gRPC (``PredictionService``, ``ModelService``).

    The channel connects lazily on the first call; ``close()`` (or leaving the
    ``with`` block) closes it. Thread-safe: share one client across threads.
    Every call has a deadline: ``timeout`` per call, else ``timeout`` here.

    TLS is on when any of ``root_certificates``, ``client_cert``/``client_key``
    (mutual TLS) or ``server_name`` is given (``serving.client._security``), or
    with ``credentials`` (any ``grpc.ChannelCredentials``), or when a credential
    is: ``api_key`` / ``bearer_token`` (sent with every call as ``x-api-key`` /
    ``authorization: Bearer`` metadata, before ``metadata``) alone turn TLS on
    with the system's CAs. ``insecure=True`` sends them over a plaintext channel
    instead. A failed handshake raises ``errors.TlsError``; it is never retried.

    ``max_response_bytes`` bounds an answer: gRPC's receive limit, and the
    bytes its tensors may take once decoded; past it, ``errors.ResponseTooLarge``.
    """

    def __init__(self, target: str, *, timeout: float = DEFAULT_TIMEOUT, retry: RetryPolicy = RetryPolicy(),
                 root_certificates: Optional[PemSource] = None, client_cert: Optional[PemSource] = None,
                 client_key: Optional[PemSource] = None, server_name: Optional[str] = None,
                 api_key: Optional[str] = None, bearer_token: Optional[str] = None,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 max_message_bytes: int = MAX_MESSAGE_BYTES, options: Sequence[ChannelOption] = (),
                 metadata: Sequence[tuple[str, str]] = (), insecure: bool = False,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> None:
        self._plan = ChannelPlan.build(
            target, root_certificates=root_certificates, client_cert=client_cert, client_key=client_key,
            server_name=server_name, api_key=api_key, bearer_token=bearer_token, credentials=credentials,
            max_message_bytes=max_message_bytes, options=options, metadata=metadata, insecure=insecure,
            max_response_bytes=max_response_bytes)
        plan = self._plan
        self._channel = (grpc.secure_channel(target, plan.credentials, plan.options) if plan.credentials
                         else grpc.insecure_channel(target, plan.options))
        self.target, self.timeout, self.retry = target, timeout, retry
        self._protocol = GrpcProtocol(max_response_bytes=max_response_bytes)
        self._stubs: dict[str, grpc.UnaryUnaryMultiCallable] = {}

    def _send_once(self, call: Call, timeout: float) -> bytes:
        stub = self._stubs.get(call.method)
        if stub is None:
            stub = self._stubs[call.method] = self._channel.unary_unary(call.method)
        try:
            return stub(call.body, timeout=timeout, metadata=self._plan.metadata or None)
        except grpc.RpcError as exc:
            raise self._plan.error(exc) from exc

    def close(self) -> None:
        """Close the channel; further calls fail."""
        self._channel.close()
