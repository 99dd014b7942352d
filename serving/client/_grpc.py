"""The synchronous gRPC client."""
from __future__ import annotations

from typing import Any, Optional, Sequence

import grpc

from serving.client._api import SyncTransport
from serving.client._grpc_protocol import GrpcProtocol, error_from_rpc
from serving.client._protocol import Call
from serving.client.retry import RetryPolicy

__all__ = ["GrpcClient", "channel_options", "DEFAULT_TIMEOUT", "MAX_MESSAGE_BYTES"]

DEFAULT_TIMEOUT = 30.0
# TF Serving's server accepts int32-max messages; gRPC clients default to 4 MiB (TF Serving #1382).
MAX_MESSAGE_BYTES = 2**31 - 1


def channel_options(max_message_bytes: int, extra: Sequence[tuple[str, Any]] = ()) -> list[tuple[str, Any]]:
    """Channel arguments: message-size limits raised both ways, then ``extra``."""
    return [("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes), *extra]


class GrpcClient(SyncTransport):
    """TF Serving over gRPC (``PredictionService``, ``ModelService``).

    The channel connects lazily on the first call; ``close()`` (or leaving the
    ``with`` block) closes it. Thread-safe: share one client across threads.
    Every call has a deadline: ``timeout`` per call, else ``timeout`` here.
    """

    def __init__(self, target: str, *, timeout: float = DEFAULT_TIMEOUT, retry: RetryPolicy = RetryPolicy(),
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 max_message_bytes: int = MAX_MESSAGE_BYTES, options: Sequence[tuple[str, Any]] = (),
                 metadata: Sequence[tuple[str, str]] = ()) -> None:
        opts = channel_options(max_message_bytes, options)
        self._channel = (grpc.secure_channel(target, credentials, opts) if credentials
                         else grpc.insecure_channel(target, opts))
        self.target, self.timeout, self.retry = target, timeout, retry
        self._metadata = tuple(metadata)
        self._protocol = GrpcProtocol()
        self._stubs: dict[str, grpc.UnaryUnaryMultiCallable] = {}

    def _send_once(self, call: Call, timeout: float) -> bytes:
        stub = self._stubs.get(call.method)
        if stub is None:
            stub = self._stubs[call.method] = self._channel.unary_unary(call.method)
        try:
            return stub(call.body, timeout=timeout, metadata=self._metadata or None)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc) from exc

    def close(self) -> None:
        """Close the channel; further calls fail."""
        self._channel.close()
