"""The asyncio REST client (``httpx.AsyncClient``): same methods as ``RestClient``, awaited."""
from __future__ import annotations

from typing import Mapping, Optional

from serving.client._api import AsyncTransport
from serving.client._grpc import DEFAULT_TIMEOUT
from serving.client._protocol import Call
from serving.client._rest import answer_of, limits, load_httpx, transport_error
from serving.client._rest_protocol import JSON_HEADERS, RestProtocol
from serving.client.retry import RetryPolicy

__all__ = ["AsyncRestClient"]


class AsyncRestClient(AsyncTransport):
    """TF Serving's REST API with asyncio; ``async with`` or ``await close()``."""

    def __init__(self, base_url: str, *, timeout: float = DEFAULT_TIMEOUT, retry: RetryPolicy = RetryPolicy(),
                 max_connections: int = 64, headers: Optional[Mapping[str, str]] = None,
                 cast_outputs: bool = True) -> None:
        self.base_url, self.timeout, self.retry = base_url.rstrip("/"), timeout, retry
        self._httpx = load_httpx()
        self._http = self._httpx.AsyncClient(base_url=self.base_url, limits=limits(max_connections),
                                       headers=dict(headers or {}), timeout=timeout)
        self._protocol = RestProtocol(cast_outputs=cast_outputs)

    async def _send_once(self, call: Call, timeout: float) -> bytes:
        try:
            response = await self._http.request(call.method, call.path, content=call.body,
                                                headers=JSON_HEADERS if call.body is not None else None,
                                                timeout=timeout)
        except self._httpx.HTTPError as exc:
            raise transport_error(exc, self.base_url + call.path) from exc
        return answer_of(response)

    async def close(self) -> None:
        """Close pooled connections."""
        await self._http.aclose()
