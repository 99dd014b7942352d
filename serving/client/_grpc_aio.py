"""The asyncio gRPC client (``grpc.aio``): same methods and arguments as ``GrpcClient``, awaited."""
from __future__ import annotations

from typing import Optional, Sequence

import grpc
import grpc.aio

from serving.client._api import AsyncTransport
from serving.client._grpc import (
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_TIMEOUT,
    MAX_MESSAGE_BYTES,
    ChannelOption,
    ChannelPlan,
)
from serving.client._grpc_protocol import GrpcProtocol
from serving.client._protocol import Call
from serving.client._security import PemSource
from serving.client.retry import RetryPolicy

__all__ = ["AsyncGrpcClient"]


class AsyncGrpcClient(AsyncTransport):
    """TF Serving over gRPC with asyncio; ``async with`` or ``await close()``.

    The channel is created on the first call, inside the running event loop.
    TLS and credentials as ``GrpcClient``.
    """

    def __init__(self, target: str, *, timeout: float = DEFAULT_TIMEOUT, retry: RetryPolicy = RetryPolicy(),
                 root_certificates: Optional[PemSource] = None, client_cert: Optional[PemSource] = None,
                 client_key: Optional[PemSource] = None, server_name: Optional[str] = None,
                 api_key: Optional[str] = None, bearer_token: Optional[str] = None,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 max_message_bytes: int = MAX_MESSAGE_BYTES, options: Sequence[ChannelOption] = (),
                 metadata: Sequence[tuple[str, str]] = (), insecure: bool = False,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> None:
        self.target, self.timeout, self.retry = target, timeout, retry
        self._plan = ChannelPlan.build(
            target, root_certificates=root_certificates, client_cert=client_cert, client_key=client_key,
            server_name=server_name, api_key=api_key, bearer_token=bearer_token, credentials=credentials,
            max_message_bytes=max_message_bytes, options=options, metadata=metadata, insecure=insecure,
            max_response_bytes=max_response_bytes)
        self._protocol = GrpcProtocol(max_response_bytes=max_response_bytes)
        self._channel: Optional[grpc.aio.Channel] = None
        self._stubs: dict[str, grpc.aio.UnaryUnaryMultiCallable] = {}

    def _stub(self, method: str) -> grpc.aio.UnaryUnaryMultiCallable:
        if self._channel is None:
            plan = self._plan
            self._channel = (grpc.aio.secure_channel(self.target, plan.credentials, plan.options)
                             if plan.credentials else grpc.aio.insecure_channel(self.target, plan.options))
        stub = self._stubs.get(method)
        if stub is None:
            stub = self._stubs[method] = self._channel.unary_unary(method)
        return stub

    async def _send_once(self, call: Call, timeout: float) -> bytes:
        try:
            return await self._stub(call.method)(call.body, timeout=timeout, metadata=self._plan.metadata or None)
        except grpc.RpcError as exc:
            raise self._plan.error(exc) from exc

    async def close(self) -> None:
        """Close the channel (if one was opened)."""
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
            self._stubs.clear()
