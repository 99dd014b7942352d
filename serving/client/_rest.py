"""The synchronous REST client (httpx, pooled connections), and what both REST clients share."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union
from urllib.parse import urlsplit

from serving import status
from serving.client._api import SyncTransport
from serving.client._grpc import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT
from serving.client._protocol import Call
from serving.client._rest_protocol import JSON_HEADERS, RestProtocol, error_from_http
from serving.client._http_body import ACCEPT_ENCODING, BoundedBody
from serving.client._security import (
    API_KEY_HEADER,
    AUTHORIZATION_HEADER,
    PemSource,
    TlsConfig,
    auth_metadata,
    http_status_tls_error,
    http_tls_error,
    plaintext_refusal,
    redact,
)
from serving.client.retry import RetryPolicy

if TYPE_CHECKING:
    import ssl

    import httpx

__all__ = ["RestClient", "HttpPlan", "transport_error", "answer_of", "load_httpx", "load_deadlines", "limits"]


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


def answer_of(response: "httpx.Response", body: Optional[bytes] = None) -> bytes:
    """The body (``body``, else the response's content) of a 2xx response; the mapped ``ServingError``
    otherwise (``TlsError`` for a TLS gateway refusing the client certificate)."""
    content = response.content if body is None else body
    if 200 <= response.status_code < 300:
        return content
    tls_error = http_status_tls_error(response.status_code, content, str(response.request.url))
    if tls_error is not None:
        raise tls_error
    raise error_from_http(response.status_code, content)


def load_deadlines() -> ModuleType:
    """``serving.client._http_deadline`` (it imports httpcore), on first use as ``load_httpx``."""
    return importlib.import_module("serving.client._http_deadline")


def limits(max_connections: int) -> "httpx.Limits":
    """Pool limits: keep every allowed connection alive."""
    return load_httpx().Limits(max_connections=max_connections, max_keepalive_connections=max_connections)


@dataclass(frozen=True)
class HttpPlan:
    """What a REST client's pool and requests carry: TLS context, headers, per-request extensions."""

    base_url: str
    verify: Union["ssl.SSLContext", bool]
    headers: dict[str, str] = field(repr=False)  # holds the credentials
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
        return {"base_url": self.base_url, "limits": limits(max_connections), "timeout": timeout,
                "headers": {"Accept-Encoding": ACCEPT_ENCODING, **self.headers}, "verify": self.verify}

    def request_kwargs(self, call: Call, timeout: float) -> dict[str, Any]:
        """Keyword arguments of one ``request``."""
        return {"content": call.body, "headers": JSON_HEADERS if call.body is not None else None,
                "timeout": timeout, "extensions": self.extensions}

    def transport_error(self, exc: "httpx.HTTPError", call: Call) -> status.ServingError:
        """``transport_error``, with the credential headers' values never in the text."""
        error = transport_error(exc, self.base_url + call.path)
        secrets = [value for name, value in self.headers.items()
                   if name.lower() in (API_KEY_HEADER, AUTHORIZATION_HEADER)]
        secrets += [value.split(" ", 1)[1] for value in list(secrets) if value.startswith("Bearer ")]
        details = redact(error.details, secrets)
        return error if details == error.details else type(error)(details)

    def body(self, response: "httpx.Response", call: Call, limit: int, deadline: Optional[float]) -> BoundedBody:
        """An empty ``BoundedBody`` for ``response``'s answer to ``call``."""
        return BoundedBody(self.base_url + call.path, response.headers, limit, deadline)


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
    ``Authorization: Bearer`` headers, and only over ``https://`` unless
    ``insecure=True``. A failed handshake raises ``errors.TlsError``; it is
    never retried.

    ``timeout`` is a deadline for the whole call, however slowly the server
    sends. ``max_response_bytes`` bounds an answer after decompression (the
    body is read in chunks and refused with ``errors.ResponseTooLarge`` once
    past it).
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
        if max_response_bytes < 1:
            raise ValueError("max_response_bytes must be at least 1")
        self.max_response_bytes = max_response_bytes
        self._httpx = load_httpx()
        self._deadlines = load_deadlines()
        self._http = self._httpx.Client(**self._plan.client_kwargs(max_connections, timeout))
        self._deadlines.enforce_deadlines(self._http)
        self._protocol = RestProtocol(cast_outputs=cast_outputs)

    def _send_once(self, call: Call, timeout: float) -> bytes:
        try:
            with self._deadlines.deadline(timeout) as end, \
                    self._http.stream(call.method, call.path, **self._plan.request_kwargs(call, timeout)) as response:
                body = self._plan.body(response, call, self.max_response_bytes, end)
                for chunk in response.iter_raw():
                    body.feed(chunk)
        except self._httpx.HTTPError as exc:
            raise self._plan.transport_error(exc, call) from exc
        return answer_of(response, body.content())

    def close(self) -> None:
        """Close pooled connections."""
        self._http.close()
