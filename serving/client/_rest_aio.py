"""The asyncio REST client (``httpx.AsyncClient``): same methods and arguments as ``RestClient``, awaited."""
from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Mapping, Optional

from serving import status

from serving.client._api import AsyncTransport
from serving.client._grpc import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT
from serving.client._protocol import Call
from serving.client._rest import HttpPlan, answer_of, load_httpx
from serving.client._rest_protocol import RestProtocol
from serving.client._security import PemSource
from serving.client.retry import RetryPolicy

if TYPE_CHECKING:
    import httpx

__all__ = ["AsyncRestClient"]


class AsyncRestClient(AsyncTransport):
    """TF Serving's REST API with asyncio; ``async with`` or ``await close()``. TLS, credentials,
    the deadline and ``max_response_bytes`` as ``RestClient``."""

    def __init__(self, base_url: str, *, timeout: float = DEFAULT_TIMEOUT, retry: RetryPolicy = RetryPolicy(),
                 root_certificates: Optional[PemSource] = None, client_cert: Optional[PemSource] = None,
                 client_key: Optional[PemSource] = None, server_name: Optional[str] = None,
                 api_key: Optional[str] = None, bearer_token: Optional[str] = None,
                 max_connections: int = 64, headers: Optional[Mapping[str, str]] = None,
                 cast_outputs: bool = True, insecure: bool = False,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> None:
        self._plan = HttpPlan.build(base_url, root_certificates=root_certificates, client_cert=client_cert,
                                    client_key=client_key, server_name=server_name, api_key=api_key,
                                    bearer_token=bearer_token, headers=headers, insecure=insecure)
        self.base_url, self.timeout, self.retry = self._plan.base_url, timeout, retry
        if max_response_bytes < 1:
            raise ValueError("max_response_bytes must be at least 1")
        self.max_response_bytes = max_response_bytes
        self._httpx = load_httpx()
        self._http = self._httpx.AsyncClient(**self._plan.client_kwargs(max_connections, timeout))
        self._protocol = RestProtocol(cast_outputs=cast_outputs)

    async def _send_once(self, call: Call, timeout: float) -> bytes:
        end = time.monotonic() + timeout
        try:
            response, body = await asyncio.wait_for(self._exchange(call, timeout, end), timeout)
        except asyncio.TimeoutError:
            raise status.DeadlineExceeded(f"Deadline Exceeded: no answer from {self.base_url}{call.path} "
                                          f"within {timeout:g}s") from None
        except self._httpx.HTTPError as exc:
            raise self._plan.transport_error(exc, call) from exc
        return answer_of(response, body)

    async def _exchange(self, call: Call, timeout: float, end: float) -> tuple[httpx.Response, bytes]:
        """Send ``call``; its response and bounded body (the caller bounds the time)."""
        async with self._http.stream(call.method, call.path, **self._plan.request_kwargs(call, timeout)) as response:
            body = self._plan.body(response, call, self.max_response_bytes, end)
            async for chunk in response.aiter_raw():
                body.feed(chunk)
        return response, body.content()

    async def close(self) -> None:
        """Close pooled connections."""
        await self._http.aclose()

