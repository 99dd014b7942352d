"""The synchronous REST client (httpx, pooled connections)."""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Mapping, Optional

from serving import status
from serving.client._api import SyncTransport
from serving.client._grpc import DEFAULT_TIMEOUT
from serving.client._protocol import Call
from serving.client._rest_protocol import JSON_HEADERS, RestProtocol, error_from_http
from serving.client.retry import RetryPolicy

if TYPE_CHECKING:
    import httpx

__all__ = ["RestClient", "transport_error", "answer_of", "load_httpx", "limits"]


def load_httpx() -> ModuleType:
    """httpx, imported on first use: gRPC-only users do not pay for it (~0.3 s)."""
    return importlib.import_module("httpx")


def transport_error(exc: "httpx.HTTPError", url: str) -> status.ServingError:
    """The SDK exception for an httpx failure: connection problems are ``Unavailable``."""
    httpx = load_httpx()
    if isinstance(exc, httpx.ConnectTimeout):
        return status.Unavailable(f"failed to connect to {url}: timed out")
    if isinstance(exc, httpx.TimeoutException):
        return status.DeadlineExceeded(f"Deadline Exceeded: no answer from {url} in time ({exc})")
    return status.Unavailable(f"failed to reach {url}: {exc or type(exc).__name__}")


def answer_of(response: "httpx.Response") -> bytes:
    """The body of a 2xx response; the mapped ``ServingError`` otherwise."""
    if 200 <= response.status_code < 300:
        return response.content
    raise error_from_http(response.status_code, response.content)


def limits(max_connections: int) -> "httpx.Limits":
    """Pool limits: keep every allowed connection alive."""
    return load_httpx().Limits(max_connections=max_connections, max_keepalive_connections=max_connections)


class RestClient(SyncTransport):
    """TF Serving over its REST API (``/v1/models/...``).

    Connections are pooled (``max_connections``) and kept alive. Predict
    casts outputs to the signature's dtypes from cached metadata
    (``cast_outputs``), so results equal the gRPC client's. TF Serving's REST
    API has no output filter (outputs are dropped client-side) and no
    ReloadConfig (``Unimplemented``).
    """

    def __init__(self, base_url: str, *, timeout: float = DEFAULT_TIMEOUT, retry: RetryPolicy = RetryPolicy(),
                 max_connections: int = 64, headers: Optional[Mapping[str, str]] = None,
                 cast_outputs: bool = True) -> None:
        self.base_url, self.timeout, self.retry = base_url.rstrip("/"), timeout, retry
        self._httpx = load_httpx()
        self._http = self._httpx.Client(base_url=self.base_url, limits=limits(max_connections),
                                  headers=dict(headers or {}), timeout=timeout)
        self._protocol = RestProtocol(cast_outputs=cast_outputs)

    def _send_once(self, call: Call, timeout: float) -> bytes:
        try:
            response = self._http.request(call.method, call.path, content=call.body,
                                          headers=JSON_HEADERS if call.body is not None else None,
                                          timeout=timeout)
        except self._httpx.HTTPError as exc:
            raise transport_error(exc, self.base_url + call.path) from exc
        return answer_of(response)

    def close(self) -> None:
        """Close pooled connections."""
        self._http.close()
