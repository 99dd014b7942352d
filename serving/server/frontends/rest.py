"""REST front-end (aiohttp): TF Serving's ``/v1/models/...`` API on its own event-loop thread.

This module runs the server; each job it composes has a module of its own:
``rest_routes`` (TF Serving's paths), ``rest_handlers`` (decode, one
``DataPlane`` call, encode), ``rest_limits`` (what one client may hold),
``rest_connection`` (aiohttp's own answers as JSON) and ``rest_drain``
(``stop(grace)``). Every ``/v1`` answer is
``Content-Type: application/json`` and errors are ``{"error": "..."}`` with
``http_server.cc``'s status mapping (``serving.status.to_http_status``). The
Prometheus page is served at the monitoring config's path as ``text/plain``;
it is rendered on a thread of its own, never on the event loop, and scrapes
that arrive while a page is being rendered share that page.

The event loop only routes and reads bodies. Decoding (gzip inflation too),
the one data-plane call and encoding run on a pool of ``--rest_api_num_threads``
threads, bounded by ``--rest_api_timeout_in_ms`` (504 / DEADLINE_EXCEEDED).

What one client may hold is bounded (``RestLimits``, ``rest_limits.py``):
connections (``ConnectionGuard``), the time to send headers and a body (408),
the body size (413, before it is read when ``Content-Length`` says so, and
after gzip inflation), and the ``/v1`` requests past their body: over
``max_concurrent_requests`` a request gets 429 / RESOURCE_EXHAUSTED at once,
never a place in the pool's queue. A slot is taken once the body is read (so a
slow upload holds a connection, bounded by the read timeout, not a slot) and
held until the worker thread is done, even after a 504. Bodies being read or
held take at most ``max_body_bytes_in_flight`` together (``BodyBytes``, 429
past it), and after a body of ``_RELEASE_AFTER_BODY_BYTES`` or more is
dropped, the free heap goes back to the OS (``malloc_trim``, on a helper
thread, one at a time). A worker that starts a request whose 504 was already
sent, or whose client has closed its connection, does nothing. An unexpected
exception is logged with a request id; the 500 names only the id, never
Python's text. Every answer is JSON, the ones aiohttp would write itself too
(an exception escaping a handler, an HTTP message it cannot parse): its own
text page never reaches a client.

"""
from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from concurrent import futures
from typing import Any, Optional, Protocol, cast

from aiohttp import web

from serving import status
from serving.server.open_file_limit import connection_cap
from serving.server.frontends.dataplane import DataPlane
from serving.server.frontends.rest_connection import JSON, json_error_handlers
from serving.server.frontends.rest_drain import drain
from serving.server.frontends.rest_handlers import Handler, RestHandlers, error_json
from serving.server.frontends.rest_limits import (
    BodyBytes,
    BodyCharge,
    ConnectionGuard,
    GuardedSite,
    RequestRefused,
    RestLimits,
    body_too_large,
    inflate_gzip,
    request_body_encoding,
)
from serving.server.frontends.rest_routes import (
    DISPATCH_REGEX,
    MODEL_STATUS_API_REGEX,
    PREDICTION_API_REGEX,
    RestRoute,
    parse_route,
    try_parse_route,
    without_body,
)
from serving.server.memory import release_free_memory
from serving.server.metrics import CONTENT_TYPE as PROMETHEUS_CONTENT_TYPE

# The routes' names are re-exported: the front-end's face for the composition root and the tests.
__all__ = [
    "MetricsPage",
    "RestFrontend",
    "RestRoute",
    "parse_route",
    "DISPATCH_REGEX",
    "PREDICTION_API_REGEX",
    "MODEL_STATUS_API_REGEX",
]

logger = logging.getLogger(__name__)

_RELEASE_AFTER_BODY_BYTES = 8 << 20
_CORS_HEADERS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "POST, GET",
                 "Access-Control-Allow-Headers": "Content-Type"}


class MetricsPage(Protocol):
    """What the REST front-end serves at the monitoring path (``ServerMetrics`` provides it)."""

    def render(self) -> bytes: ...


class RestFrontend:
    """The REST server; ``start()`` binds and serves on its own event-loop thread.

    ``stop(grace)`` closes the listening socket at once, lets running requests
    finish for up to ``grace`` seconds, then closes connections. ``limits``
    bounds connections, read time, bodies and requests in progress.
    """

    def __init__(self, dataplane: DataPlane, *, port: int, host: str = "0.0.0.0", num_threads: int = 4,
                 timeout_ms: int = 30000, limits: RestLimits = RestLimits(),
                 monitoring_path: Optional[str] = None, metrics: Optional[MetricsPage] = None, enable_cors: bool = False,
                 max_tensor_elements: Optional[int] = None) -> None:
        self._dp = dataplane
        self._host, self._port = host, port
        self._pool = futures.ThreadPoolExecutor(max_workers=max(1, num_threads), thread_name_prefix="rest")
        self._timeout = timeout_ms / 1000.0 if timeout_ms > 0 else None
        self._limits = limits
        self._read_timeout = limits.read_timeout_seconds if limits.read_timeout_seconds > 0 else None
        self._in_flight = 0
        self._body_bytes = BodyBytes(limits.max_body_bytes_in_flight, self._body_given_back)
        self._trim_pending = False
        self._monitoring_path = monitoring_path
        self._metrics = metrics
        self._metrics_pool = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rest-metrics")
        self._page: Optional[asyncio.Future] = None   # the page being rendered, shared by concurrent scrapes
        self._cors = enable_cors
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._runner: Optional[web.AppRunner] = None
        self._guard: Optional[ConnectionGuard] = None
        self._thread: Optional[threading.Thread] = None
        self._handlers = RestHandlers(dataplane, max_tensor_elements)

    # -- event loop side ------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        guard = self._guard
        assert guard is not None   # set before the site starts accepting
        guard.request_started(request.protocol)
        try:
            return await self._answer(request)
        except Exception as exc:  # noqa: BLE001 - never aiohttp's own page, never Python's text
            error = status.internal_error(f"Internal error while handling {request.method} request", exc, logger)
            return self._reply(500, error_json(error.details))
        finally:
            guard.request_finished(request.protocol, body_read=request.content.is_eof())

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        if self._monitoring_path is not None and request.raw_path.split("?", 1)[0] == self._monitoring_path:
            return await self._prometheus()
        path = request.raw_path   # the query string is part of the path the /v1 regexes match, as in TF Serving
        if not DISPATCH_REGEX.fullmatch(path):
            return self._reply(404, error_json(f"Not found: {request.method} {path}"))
        try:
            return self._reply(200, await self._serve_v1(request, path))
        except RequestRefused as exc:
            response = self._reply(exc.http_status, error_json(exc.details))
            response.force_close()
            return response
        except status.ServingError as exc:
            body = b"" if getattr(exc, "empty_body", False) else error_json(exc.details)
            return self._reply(status.to_http_status(exc.code), body)
        except Exception as exc:  # noqa: BLE001 - the server must answer and stay up
            error = status.internal_error(f"Internal error while handling {request.method} {path}", exc, logger)
            return self._reply(500, error_json(error.details))

    async def _serve_v1(self, request: web.Request, path: str) -> bytes:
        """One ``/v1`` request, counted in the metrics under its model and verb as TF Serving does."""
        route, error = try_parse_route(request.method, path)
        with self._dp.track(route.model_name, route.method, "REST"):
            if request.method == "OPTIONS":
                if re.search(r"https?://", request.headers.get("Origin", "")) is None:
                    raise without_body(status.FailedPrecondition("Origin header is missing in CORS preflight"))
                return b""
            if error is not None:
                raise error
            body, encoding = b"", "identity"
            charge = BodyCharge(self._body_bytes)
            try:
                if request.method == "POST":
                    encoding = request_body_encoding(request.headers.get("Content-Encoding"))
                    body = await self._read_body(request, charge)
            except BaseException:
                charge.release()
                raise
            return await self._run(self._handlers.handler(route), route, body, encoding,
                                   charge, request.transport)

    async def _run(self, handler: Handler, route: RestRoute,
                   body: bytes, encoding: str, charge: BodyCharge, transport: Optional[asyncio.BaseTransport]
                   ) -> bytes:
        """Admit the request (429 over the limit), then run it on the pool within ``--rest_api_timeout_in_ms``.

        The body's ``charge`` is given back once the worker is done (or at once if it never starts).
        """
        worker: Optional[futures.Future] = None
        try:
            if self._in_flight >= self._limits.max_concurrent_requests:
                raise status.ResourceExhausted(
                    f"Too many REST requests in progress: the limit is {self._limits.max_concurrent_requests} "
                    "(embedded server flag --rest_api_max_concurrent_requests)")
            deadline = None if self._timeout is None else time.monotonic() + self._timeout
            worker = self._pool.submit(self._call, handler, route, body, encoding, deadline, transport)
            self._in_flight += 1
            return await self._result(worker)
        finally:
            self._leave_when_done(worker, charge)

    async def _read_body(self, request: web.Request, charge: BodyCharge) -> bytes:
        limit = self._limits.max_body_bytes
        declared = request.content_length
        if declared is not None and declared > limit:
            raise body_too_large(limit, f"Request body of {declared} bytes")
        try:   # (asyncio.timeout() is Python 3.11's; 3.10's wait_for raises asyncio.TimeoutError)
            body = await asyncio.wait_for(self._read_chunks(request, limit, charge), self._read_timeout)
            return cast(bytes, body)   # the bytearray itself, read as bytes by every handler (no copy)
        except asyncio.TimeoutError:
            raise RequestRefused(
                f"Request body not received within {self._limits.read_timeout_seconds:g} seconds "
                "(embedded server flag --rest_api_read_timeout_seconds)",
                code=status.Code.DEADLINE_EXCEEDED, http_status=408) from None

    @staticmethod
    async def _read_chunks(request: web.Request, limit: int, charge: BodyCharge) -> bytearray:
        """The body as one growing buffer (no copy at the end), each chunk charged as it arrives."""
        body = bytearray()
        try:
            async for chunk in request.content.iter_chunked(1 << 16):
                if len(body) + len(chunk) > limit:
                    raise body_too_large(limit, f"Request body of {len(body) + len(chunk)}+ bytes")
                charge.take(len(chunk))
                body += chunk
        except ConnectionResetError:   # aiohttp's word for a client that closed mid-body
            body.clear()
            raise status.Cancelled("The client closed its connection while sending the request body") from None
        except BaseException:
            # The exception's traceback keeps this frame, a cycle the frozen heap's collector finds late:
            # the buffer itself goes now.
            body.clear()
            raise
        return body

    def _call(self, handler: Handler, route: RestRoute,
              raw: bytes, encoding: str, deadline: Optional[float], transport: Optional[asyncio.BaseTransport]
              ) -> bytes:
        """On the pool: nothing if the answer can no longer reach the client; else inflate a gzip body
        (bounded), then the handler."""
        if deadline is not None and time.monotonic() >= deadline:
            raise status.DeadlineExceeded("Deadline Exceeded")   # the loop has already answered 504
        if transport is None or transport.is_closing():          # an attribute read: the client has gone
            raise status.Cancelled("The client closed its connection before the request ran")
        body = inflate_gzip(raw, self._limits.max_body_bytes) if encoding == "gzip" else raw
        return handler(route, body, deadline)

    async def _result(self, worker: futures.Future) -> bytes:
        try:
            return await asyncio.wait_for(asyncio.wrap_future(worker), self._timeout)
        except asyncio.TimeoutError:
            assert self._timeout is not None   # only a call with a timeout times out
            raise status.DeadlineExceeded(
                f"Timed out waiting for notification (REST call exceeded --rest_api_timeout_in_ms="
                f"{int(self._timeout * 1000)})") from None

    def _leave_when_done(self, worker: Optional[futures.Future], charge: BodyCharge) -> None:
        """Free the request's slot and body bytes now, or when its worker thread finishes (it may outlive
        a 504)."""
        if worker is None:
            charge.release()
        elif worker.done():
            self._leave(charge)
        else:
            worker.add_done_callback(lambda _: self._leave_from_worker(charge))

    def _leave_from_worker(self, charge: BodyCharge) -> None:
        try:
            assert self._loop is not None   # workers run only while the loop serves
            self._loop.call_soon_threadsafe(self._leave, charge)
        except RuntimeError:  # the loop has stopped: nothing is admitted any more
            pass

    def _leave(self, charge: BodyCharge) -> None:
        self._in_flight -= 1
        charge.release()

    def _body_given_back(self, count: int) -> None:
        """After a large body is dropped, one ``malloc_trim`` at a time on a helper thread."""
        if count < _RELEASE_AFTER_BODY_BYTES or self._trim_pending or self._loop is None:
            return
        self._trim_pending = True   # after this loop step, once the request's frames (and body) are gone
        self._loop.call_soon(self._loop.run_in_executor, None, self._trim)

    def _trim(self) -> None:
        self._trim_pending = False
        release_free_memory()

    def _reply(self, http_status: int, body: bytes) -> web.Response:
        response = web.Response(status=http_status, body=body, headers={"Content-Type": JSON})
        if self._cors:
            response.headers.update(_CORS_HEADERS)
        return response

    async def _prometheus(self) -> web.Response:
        body = b""
        if self._metrics is not None:
            if self._page is None or self._page.done():
                self._page = asyncio.wrap_future(self._metrics_pool.submit(self._metrics.render))
            body = await asyncio.shield(self._page)
        return web.Response(body=body, headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})

    # -- lifecycle ------------------------------------------------------
    def start(self) -> None:
        """Bind and serve; returns once the port accepts connections (raises if it cannot bind)."""
        ready: futures.Future = futures.Future()
        self._thread = threading.Thread(target=self._serve, args=(ready,), name="rest-loop", daemon=True)
        self._thread.start()
        ready.result()
        logger.info("Exporting HTTP/REST API at:%s:%d ...", self._host, self._port)

    def _serve(self, ready: futures.Future) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._setup())
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            ready.set_exception(exc)
            loop.close()
            return
        ready.set_result(None)
        loop.run_forever()
        loop.close()

    async def _setup(self) -> None:
        app = web.Application(client_max_size=self._limits.max_body_bytes + 1)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # Bodies are read raw (gzip is inflated, bounded, on the pool); idle keep-alive ends at the read timeout.
        options: dict[str, Any] = {"auto_decompress": False}
        if self._read_timeout is not None:
            options["keepalive_timeout"] = self._read_timeout
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, **options)
        await self._runner.setup()
        server = self._runner.server
        assert server is not None   # made by setup()
        self._guard = ConnectionGuard(json_error_handlers(server),
                                      max_connections=connection_cap(self._limits.max_connections),
                                      read_timeout_seconds=self._limits.read_timeout_seconds)
        await GuardedSite(self._runner, self._guard, self._host, self._port).start()

    def stop(self, grace: float = 30.0) -> None:
        """Close the listener now; wait up to ``grace`` seconds for running requests."""
        if self._loop is None or self._runner is None:
            return
        runner, loop = self._runner, self._loop
        self._runner = None
        drain(runner, loop, grace)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._metrics_pool.shutdown(wait=False, cancel_futures=True)
