"""The synchronous REST client (httpx, pooled connections), and what both REST clients share."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union
from urllib.parse import urlsplit

from serving import status
from serving.client._api import SyncTransport
from serving.client._grpc import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT
from serving.client._protocol import Call
from serving.client._rest_protocol import JSON_HEADERS, RestProtocol, error_from_http
from serving.client._security import (
    PemSource,
    TlsConfig,
    auth_metadata,
    http_status_tls_error,
    http_tls_error,
    plaintext_refusal,
)
from serving.client.retry import RetryPolicy

if TYPE_CHECKING:
    import ssl

    import httpx

__all__ = ["RestClient", "HttpPlan", "transport_error", "answer_of", "load_httpx", "limits"]


def load_httpx() -> ModuleType:
    """httpx, imported on first use: gRPC-only users do not pay for it (~0.3 s)."""
    return importlib.import_module("httpx")


def transport_error(exc: "httpx.HTTPError", url: str) -> status.ServingError:
    """The SDK exception for an httpx failure: ``TlsError`` for a failed handshake, connection
    problems ``Unavailable``."""
    tls_error = http_tls_error(exc, url)
    if tls_error is not None:
        return tls_error
    httpx = load_httpx()
    if isinstance(exc, httpx.ConnectTimeout):
        return status.Unavailable(f"failed to connect to {url}: timed out")
    if isinstance(exc, httpx.TimeoutException):
        return status.DeadlineExceeded(f"Deadline Exceeded: no answer from {url} in time ({exc})")
    return status.Unavailable(f"failed to reach {url}: {exc or type(exc).__name__}")


def answer_of(response: "httpx.Response") -> bytes:
    """The body of a 2xx response; the mapped ``ServingError`` otherwise (``TlsError`` for a TLS
    gateway refusing the client certificate)."""
    if 200 <= response.status_code < 300:
        return response.content
    tls_error = http_status_tls_error(response.status_code, response.content, str(response.request.url))
    if tls_error is not None:
        raise tls_error
    raise error_from_http(response.status_code, response.content)


def limits(max_connections: int) -> "httpx.Limits":
    """Pool limits: keep every allowed connection alive."""
    return load_httpx().Limits(max_connections=max_connections, max_keepalive_connections=max_connections)


@dataclass(frozen=True)
class HttpPlan:
    """What a REST client's pool and requests carry: TLS context, headers, per-request extensions."""

    base_url: str
    verify: Union["ssl.SSLContext", bool]
    headers: dict[str, str]
    extensions: Optional[dict[str, str]]

    @classmethod
    def build(cls, base_url: str, *, root_certificates: Optional[PemSource], client_cert: Optional[PemSource],
              client_key: Optional[PemSource], server_name: Optional[str], api_key: Optional[str],
              bearer_token: Optional[str], headers: Optional[Mapping[str, str]],
              insecure: bool = False) -> "HttpPlan":
        base_url = base_url.rstrip("/")
        tls = TlsConfig.from_args(root_certificates, client_cert, client_key, server_name)
        https = urlsplit(base_url).scheme == "https"
        if tls is not None and not https:
            raise ValueError(f"TLS arguments need an https:// base_url, not {base_url!r} "
                             "(TF Serving's own REST port has no TLS: put a TLS gateway in front)")
        auth = auth_metadata(api_key, bearer_token)
        if auth and not https and not insecure:
            given = [name for name, value in (("api_key", api_key), ("bearer_token", bearer_token)) if value]
            raise ValueError(plaintext_refusal(given, base_url))
        return cls(base_url, True if tls is None else tls.ssl_context(load_httpx()),
                   {**dict(auth), **dict(headers or {})},
                   tls.http_extensions() if tls else None)

    def client_kwargs(self, max_connections: int, timeout: float) -> dict[str, Any]:
        """Keyword arguments of ``httpx.Client`` / ``httpx.AsyncClient``."""
        return {"base_url": self.base_url, "limits": limits(max_connections), "headers": self.headers,
                "timeout": timeout, "verify": self.verify}

    def request_kwargs(self, call: Call, timeout: float) -> dict[str, Any]:
        """Keyword arguments of one ``request``."""
        return {"content": call.body, "headers": JSON_HEADERS if call.body is not None else None,
                "timeout": timeout, "extensions": self.extensions}

    def transport_error(self, exc: "httpx.HTTPError", call: Call) -> status.ServingError:
        return transport_error(exc, self.base_url + call.path)


class RestClient(SyncTransport):
    """TF Serving over its REST API (``/v1/models/...``).

    Connections are pooled (``max_connections``) and kept alive. Predict
    casts inputs, and outputs (``cast_outputs``), to the signature's dtypes
    from cached metadata, so results and refusals equal the gRPC client's. TF Serving's REST
    API has no output filter (outputs are dropped client-side) and no
    ReloadConfig (``Unimplemented``).

    TLS arguments as ``GrpcClient``'s (``root_certificates``,
    ``client_cert``/``client_key``, ``server_name``); they need an
    ``https://`` ``base_url``, which otherwise uses httpx's default trust.
    ``api_key`` / ``bearer_token`` go with every request as ``x-api-key`` /
    ``Authorization: Bearer`` headers. A failed handshake raises
    ``errors.TlsError``; it is never retried.
    """

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
        self._httpx = load_httpx()
        self._http = self._httpx.Client(**self._plan.client_kwargs(max_connections, timeout))
        self._protocol = RestProtocol(cast_outputs=cast_outputs)

    def _send_once(self, call: Call, timeout: float) -> bytes:
        try:
            response = self._http.request(call.method, call.path, **self._plan.request_kwargs(call, timeout))
        except self._httpx.HTTPError as exc:
            raise self._plan.transport_error(exc, call) from exc
        return answer_of(response)

    def close(self) -> None:
        """Close pooled connections."""
        self._http.close()
