"""The synchronous gRPC client, and the channel settings both gRPC clients share."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union

import grpc

from serving import status
from serving.client._api import SyncTransport
from serving.client._grpc_protocol import GrpcProtocol, RpcStatus, error_from_rpc
from serving.client._protocol import Call
from serving.client._security import PemSource, TlsConfig, auth_metadata, grpc_tls_error
from serving.client.retry import RetryPolicy

__all__ = ["GrpcClient", "ChannelPlan", "ChannelOption", "channel_options", "DEFAULT_TIMEOUT", "MAX_MESSAGE_BYTES"]

DEFAULT_TIMEOUT = 30.0
# TF Serving's server accepts int32-max messages; gRPC clients default to 4 MiB (TF Serving #1382).
MAX_MESSAGE_BYTES = 2**31 - 1

ChannelOption = tuple[str, Union[int, str]]
"""One gRPC channel argument: ``("grpc.max_receive_message_length", 1024)``."""


def channel_options(max_message_bytes: int, extra: Sequence[ChannelOption] = ()) -> list[ChannelOption]:
    """Channel arguments: message-size limits raised both ways, then ``extra``."""
    return [("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes), *extra]


@dataclass(frozen=True)
class ChannelPlan:
    """What a gRPC client's channel and calls carry: credentials, options, per-call metadata.

    ``credentials`` is None for a plaintext channel; ``metadata`` (the API key
    or bearer token first) goes with every call.
    """

    target: str
    credentials: Optional[grpc.ChannelCredentials]
    options: list[ChannelOption]
    metadata: tuple[tuple[str, str], ...]

    @classmethod
    def build(cls, target: str, *, root_certificates: Optional[PemSource], client_cert: Optional[PemSource],
              client_key: Optional[PemSource], server_name: Optional[str], api_key: Optional[str],
              bearer_token: Optional[str], credentials: Optional[grpc.ChannelCredentials],
              max_message_bytes: int, options: Sequence[ChannelOption],
              metadata: Sequence[tuple[str, str]]) -> "ChannelPlan":
        tls = TlsConfig.from_args(root_certificates, client_cert, client_key, server_name)
        if tls is not None and credentials is not None:
            raise ValueError("give credentials= or the TLS arguments (root_certificates, client_cert, "
                             "client_key, server_name), not both")
        return cls(target,
                   credentials if tls is None else tls.grpc_credentials(),
                   channel_options(max_message_bytes, [*(tls.grpc_options() if tls else []), *options]),
                   (*auth_metadata(api_key, bearer_token), *metadata))

    def error(self, exc: RpcStatus) -> status.ServingError:
        """The SDK exception for a failed call: ``TlsError`` for a failed handshake."""
        tls_error = grpc_tls_error(exc.code(), exc.details() or "", self.target) if self.credentials else None
        return tls_error or error_from_rpc(exc)


class GrpcClient(SyncTransport):
    """TF Serving over gRPC (``PredictionService``, ``ModelService``).

    The channel connects lazily on the first call; ``close()`` (or leaving the
    ``with`` block) closes it. Thread-safe: share one client across threads.
    Every call has a deadline: ``timeout`` per call, else ``timeout`` here.

    TLS is on when any of ``root_certificates``, ``client_cert``/``client_key``
    (mutual TLS) or ``server_name`` is given (``serving.client._security``), or
    with ``credentials`` (any ``grpc.ChannelCredentials``, e.g.
    ``grpc.ssl_channel_credentials()`` for the system's CAs alone).
    ``api_key`` / ``bearer_token`` go with every call as ``x-api-key`` /
    ``authorization: Bearer`` metadata, before ``metadata``. A failed handshake
    raises ``errors.TlsError``; it is never retried.
    """

    def __init__(self, target: str, *, timeout: float = DEFAULT_TIMEOUT, retry: RetryPolicy = RetryPolicy(),
                 root_certificates: Optional[PemSource] = None, client_cert: Optional[PemSource] = None,
                 client_key: Optional[PemSource] = None, server_name: Optional[str] = None,
                 api_key: Optional[str] = None, bearer_token: Optional[str] = None,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 max_message_bytes: int = MAX_MESSAGE_BYTES, options: Sequence[ChannelOption] = (),
                 metadata: Sequence[tuple[str, str]] = ()) -> None:
        self._plan = ChannelPlan.build(
            target, root_certificates=root_certificates, client_cert=client_cert, client_key=client_key,
            server_name=server_name, api_key=api_key, bearer_token=bearer_token, credentials=credentials,
            max_message_bytes=max_message_bytes, options=options, metadata=metadata)
        plan = self._plan
        self._channel = (grpc.secure_channel(target, plan.credentials, plan.options) if plan.credentials
                         else grpc.insecure_channel(target, plan.options))
        self.target, self.timeout, self.retry = target, timeout, retry
        self._protocol = GrpcProtocol()
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
