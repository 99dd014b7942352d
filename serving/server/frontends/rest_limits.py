"""What the REST port lets one client hold: connections, read time, request bodies.

TF Serving's REST server has no flags for these; they are the embedded
server's own (``serving.server.flags``), so that a client that reaches the port
cannot take the event loop, the file descriptors or the memory:

- ``RestLimits``: the four numbers, from ``--rest_api_max_body_bytes``,
  ``--rest_api_read_timeout_seconds``, ``--rest_api_max_connections`` and
  ``--rest_api_max_concurrent_requests``.
- ``ConnectionGuard``: the protocol factory in front of aiohttp's, served by
  ``GuardedSite``. At most ``max_connections`` are open: a new connection
  over the cap closes an idle one (no request in progress: the oldest that
  never sent a request, else the least recently active), or, when every
  connection has a request in progress, is answered 503 and closed at once.
  A connection must send its first request's headers within
  ``read_timeout_seconds`` or it is closed; later requests on it are bounded
  by aiohttp's keep-alive timeout, which the front-end sets to the same value.
  Request headers take at most ``MAX_HEADER_BYTES`` (aiohttp bounds each
  line, not their number): more bytes before a request starts get 431 and a
  close. Loop thread only.
- Request bodies are identity or gzip. TF Serving inflates ``Content-Encoding:
  gzip`` bodies itself (``net_http`` ``EvHTTPRequest::ReadRequestGzipBytes``,
  at most 10 MiB inflated); here ``inflate_gzip`` inflates in 64 KiB steps on a
  worker thread, never past ``max_body_bytes``. Any other coding is 415.
- ``BodyBytes``: the bytes of every body being read or held by a request in
  progress, together, at most ``max_body_bytes_in_flight``; a body that would
  pass it gets 429 and a close (``--rest_api_max_body_bytes_in_flight``), so
  1024 connections cannot hold 1024 x 64 MiB. ``BodyCharge`` is one
  request's share, given back once its worker thread is done.
- ``RequestRefused``: a refusal with its own HTTP status (408, 413, 415), which
  TF Serving's code-to-status table has no row for.
"""
from __future__ import annotations

import asyncio
import logging
import zlib
from dataclasses import dataclass
from typing import Callable, Optional

from aiohttp import web

from serving import codec, status
from serving.server.flags import (
    DEFAULT_REST_API_MAX_BODY_BYTES,
    DEFAULT_REST_API_MAX_CONCURRENT_REQUESTS,
    DEFAULT_REST_API_MAX_CONNECTIONS,
    DEFAULT_REST_API_READ_TIMEOUT_SECONDS,
)

__all__ = [
    "RestLimits",
    "RequestRefused",
    "ConnectionGuard",
    "GuardedSite",
    "request_body_encoding",
    "inflate_gzip",
    "body_too_large",
    "MAX_HEADER_BYTES",
    "BodyBytes",
    "BodyCharge",
]

logger = logging.getLogger(__name__)

_INFLATE_STEP = 1 << 16
# Bytes a connection may send while no request is in progress: its headers, and the first bytes of a body that
# arrive before the request starts (aiohttp stops reading a body at 128 KiB until the handler reads it).
MAX_HEADER_BYTES = 1 << 20
_GZIP_WBITS = 16 + zlib.MAX_WBITS


@dataclass(frozen=True)
class RestLimits:
    """Bounds of the REST port; defaults are the embedded server flags' defaults."""

    max_body_bytes: int = DEFAULT_REST_API_MAX_BODY_BYTES
    read_timeout_seconds: float = DEFAULT_REST_API_READ_TIMEOUT_SECONDS
    max_connections: int = DEFAULT_REST_API_MAX_CONNECTIONS
    max_concurrent_requests: int = DEFAULT_REST_API_MAX_CONCURRENT_REQUESTS
    max_body_bytes_in_flight: Optional[int] = None   # None: no limit


class RequestRefused(status.ServingError):
    """A request refused before the API sees it, answered with ``http_status`` and ``Connection: close``."""

    def __init__(self, details: str, *, code: status.Code, http_status: int) -> None:
        super().__init__(details, code=code)
        self.http_status = http_status


class BodyBytes:
    """Bytes of REST bodies read or held by requests in progress, across connections; loop thread only."""

    def __init__(self, limit: Optional[int], on_given_back: Callable[[int], None] = lambda count: None) -> None:
        self.limit = limit
        self.held = 0
        self._on_given_back = on_given_back

    def take(self, count: int) -> None:
        """Charge ``count`` more bytes; 429 (and a close) if bodies together would pass the limit."""
        if self.limit is not None and self.held + count > self.limit:
            raise RequestRefused(
                f"REST request bodies in progress would hold more than {self.limit} bytes together "
                f"({self.held} held, {count} more arrived) (embedded server flag "
                "--rest_api_max_body_bytes_in_flight)", code=status.Code.RESOURCE_EXHAUSTED, http_status=429)
        self.held += count

    def give(self, count: int) -> None:
        self.held -= count
        if count:
            self._on_given_back(count)


class BodyCharge:
    """One request's bytes in a ``BodyBytes``: charged as chunks arrive, given back once (``release``)."""

    def __init__(self, pool: BodyBytes) -> None:
        self._pool = pool
        self.bytes = 0

    def take(self, count: int) -> None:
        self._pool.take(count)
        self.bytes += count

    def release(self) -> None:
        taken, self.bytes = self.bytes, 0
        self._pool.give(taken)


def body_too_large(limit: int, what: str) -> RequestRefused:
    """413 naming the limit and its flag; ``what`` says which size was over it."""
    return RequestRefused(
        f"{what} exceeds the limit of {limit} bytes (embedded server flag --rest_api_max_body_bytes)",
        code=status.Code.INVALID_ARGUMENT, http_status=413)


def request_body_encoding(content_encoding: Optional[str]) -> str:
    """``"identity"`` or ``"gzip"`` for a ``Content-Encoding`` header; 415 for any other coding."""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return "identity"
    if codings in (["gzip"], ["x-gzip"]):
        return "gzip"
    raise RequestRefused(
        f"Content-Encoding: {content_encoding} is not supported: request bodies must be identity or gzip",
        code=status.Code.INVALID_ARGUMENT, http_status=415)


def inflate_gzip(data: bytes, limit: int) -> bytes:
    """The gzip ``data`` inflated, 64 KiB at a time; 413 as soon as it passes ``limit`` bytes, 400 if corrupt."""
    inflated = bytearray()  # one growing buffer: large, so the allocator gives it back to the system
    inflater = zlib.decompressobj(_GZIP_WBITS)
    pending = data
    try:
        while True:
            part = inflater.decompress(pending, _INFLATE_STEP)
            if len(inflated) + len(part) > limit:
                raise body_too_large(limit, "Request body inflated from Content-Encoding: gzip")
            inflated += part
            pending = inflater.unconsumed_tail
            if inflater.eof:
                pending = inflater.unused_data
                if not pending:
                    break
                inflater = zlib.decompressobj(_GZIP_WBITS)  # the next gzip member
            elif not part and not pending:
                break
    except zlib.error as exc:
        raise status.InvalidArgument(f"Content-Encoding: gzip body could not be inflated: {exc}") from None
    if not inflater.eof:
        raise status.InvalidArgument("Content-Encoding: gzip body could not be inflated: the stream ends early")
    return bytes(inflated)


def _raw_response(status_line: str, message: str) -> bytes:
    """A whole HTTP/1.1 error response written on a connection aiohttp does not (or no longer) handle."""
    body = codec.json_dumps({"error": message})
    head = (f"HTTP/1.1 {status_line}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode("ascii") + body


_HEADERS_TOO_LARGE = _raw_response(
    "431 Request Header Fields Too Large", f"Request headers exceed the limit of {MAX_HEADER_BYTES} bytes")


class _GuardedConnection(asyncio.Protocol):
    """One accepted connection: aiohttp's handler behind the guard, or a 503 and a close."""

    def __init__(self, guard: ConnectionGuard) -> None:
        self._guard = guard
        self.handler: Optional[asyncio.Protocol] = None
        self.transport: Optional[asyncio.Transport] = None
        self.requests_in_progress = 0
        self.served = False
        self.header_bytes: Optional[int] = 0  # counted while headers are awaited, None while a request runs
        self.header_timer: Optional[asyncio.TimerHandle] = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.handler = self._guard.admit(self)
        if self.handler is not None:
            self.handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.handler is None:
            return
        if self.header_bytes is not None:
            self.header_bytes += len(data)
            if self.header_bytes > MAX_HEADER_BYTES:
                self.refuse(_HEADERS_TOO_LARGE)
                return
        self.handler.data_received(data)

    def eof_received(self) -> Optional[bool]:
        return self.handler.eof_received() if self.handler is not None else None

    def pause_writing(self) -> None:
        if self.handler is not None:
            self.handler.pause_writing()

    def resume_writing(self) -> None:
        if self.handler is not None:
            self.handler.resume_writing()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if self.handler is not None:
            self._guard.forget(self)
            self.handler.connection_lost(exc)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def refuse(self, response: bytes) -> None:
        """Answer ``response`` and close, aiohttp's handler (if any) no longer fed."""
        if self.transport is not None:
            self.transport.write(response)
            self.transport.close()


class ConnectionGuard:
    """The REST port's open connections: at most ``max_connections``, each sending headers in time.

    ``protocol`` is the factory for ``loop.create_server``; ``make_handler``
    makes aiohttp's per-connection handler (the ``web.Server``). The front-end
    brackets each request with ``request_started`` / ``request_finished`` (keyed
    by aiohttp's handler, ``request.protocol``). Loop thread only.
    """

    def __init__(self, make_handler: Callable[[], asyncio.Protocol], *, max_connections: int,
                 read_timeout_seconds: float) -> None:
        self._make_handler = make_handler
        self.max_connections = max(1, max_connections)
        self._read_timeout = read_timeout_seconds
        self._open: dict[object, _GuardedConnection] = {}  # by handler, least recently active first
        self._refusal = _raw_response(
            "503 Service Unavailable", f"Too many open connections to the REST port: the limit is "
            f"{self.max_connections} (embedded server flag --rest_api_max_connections)")

    def protocol(self) -> asyncio.Protocol:
        return _GuardedConnection(self)

    def admit(self, connection: _GuardedConnection) -> Optional[asyncio.Protocol]:
        """aiohttp's handler for a new connection, or None after answering 503 and closing it."""
        if len(self._open) >= self.max_connections and not self._evict_idle():
            connection.refuse(self._refusal)
            return None
        handler = self._make_handler()
        self._open[handler] = connection
        if self._read_timeout > 0:
            connection.header_timer = asyncio.get_running_loop().call_later(
                self._read_timeout, self._headers_overdue, connection)
        return handler

    def forget(self, connection: _GuardedConnection) -> None:
        if connection.header_timer is not None:
            connection.header_timer.cancel()
        self._open.pop(connection.handler, None)

    def request_started(self, handler: asyncio.BaseProtocol) -> None:
        connection = self._open.get(handler)
        if connection is not None:
            connection.requests_in_progress += 1
            connection.served = True
            connection.header_bytes = None
            if connection.header_timer is not None:
                connection.header_timer.cancel()
                connection.header_timer = None

    def request_finished(self, handler: asyncio.BaseProtocol, *, body_read: bool) -> None:
        """``body_read``: the whole body was read, so what the client sends next is the next request's headers
        (otherwise aiohttp reads and drops the rest of the body for a while, which is not counted)."""
        connection = self._open.pop(handler, None)
        if connection is not None:
            connection.requests_in_progress -= 1
            if connection.requests_in_progress == 0 and body_read:
                connection.header_bytes = 0
            self._open[handler] = connection  # now the most recently active

    def _evict_idle(self) -> bool:
        idle = [c for c in self._open.values() if c.requests_in_progress == 0]
        if not idle:
            return False
        victim = next((c for c in idle if not c.served), idle[0])
        self._open.pop(victim.handler, None)  # its slot is free now; connection_lost follows
        victim.close()
        return True

    def _headers_overdue(self, connection: _GuardedConnection) -> None:
        connection.header_timer = None
        if connection.requests_in_progress == 0:
            connection.close()


class GuardedSite(web.BaseSite):
    """aiohttp's TCP site with ``ConnectionGuard``'s protocol in front of the runner's handlers."""

    def __init__(self, runner: web.BaseRunner, guard: ConnectionGuard, host: str, port: int, *,
                 backlog: int = 128) -> None:
        super().__init__(runner, backlog=backlog)
        self._guard = guard
        self._host, self._port = host, port

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        self._server = await asyncio.get_running_loop().create_server(
            self._guard.protocol, self._host, self._port, backlog=self._backlog, reuse_address=True)
