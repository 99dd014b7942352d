"""aiohttp's connection handler for the REST port, answering what aiohttp answers itself as ``{"error": ...}``.

An HTTP message aiohttp cannot parse, a handler's exception or timeout:
aiohttp writes its own text page for these; here they are JSON like every
other answer, and Python's text never reaches a client (a 500 names only a
request id). An HTTP/2 connection (a gRPC client on the REST port) is one
warning line and a 400. aiohttp keeps its web server's handler arguments
private (``web.Server._loop``, ``._kwargs``); :func:`json_error_handlers` is
the one place that reads them.
"""
from __future__ import annotations

import http
import logging
from typing import Callable, Optional

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from serving import status
from serving.server.frontends.rest_handlers import error_json

__all__ = ["JsonErrorHandler", "json_error_handlers", "JSON"]

logger = logging.getLogger(__name__)

JSON = "application/json"
_HTTP_STATUSES = frozenset(http.HTTPStatus)
# How aiohttp's parser refuses HTTP/2's connection preface ("PRI * HTTP/2.0"): a gRPC client on this port.
_HTTP2_PREFACE_ERROR = "PRI/Upgrade"
_HTTP2_ON_REST_PORT = ("An HTTP/2 connection (a gRPC client?) reached the REST port and was answered 400: "
                      "gRPC is served on --port, this port takes REST over HTTP/1.1")


def json_error_handlers(server: web.Server) -> Callable[[], JsonErrorHandler]:
    """A factory of ``JsonErrorHandler`` with the arguments ``server``'s own factory gives ``RequestHandler``."""
    return lambda: JsonErrorHandler(server, loop=server._loop, **server._kwargs)


class JsonErrorHandler(RequestHandler):
    """aiohttp's connection handler, answering what it answers itself (an HTTP message it cannot
    parse, a handler's exception or timeout) as ``{"error": ...}`` instead of its text page.

    The web server's own factory makes plain ``RequestHandler``s; the front-end's connection
    guard makes these instead, with the same arguments (``web.Server`` keeps them private).
    """

    __slots__ = ()

    def handle_error(self, request: web.BaseRequest, http_status: int = 500, exc: Optional[BaseException] = None,
                     message: Optional[str] = None) -> web.StreamResponse:
        if request.writer.output_size > 0:  # part of an answer went out: aiohttp closes the connection
            return super().handle_error(request, http_status, exc, message)
        if http_status >= 500:
            details = status.internal_error("Internal error while handling a request",
                                            exc or RuntimeError(message), logger).details
        elif _HTTP2_PREFACE_ERROR in str(message or exc or ""):
            logger.warning(_HTTP2_ON_REST_PORT)  # one line, no traceback: a client's mistake, not the server's
            details = "Malformed HTTP request: HTTP/2 on the REST port; gRPC is served on its own port"
        else:
            logger.debug("Malformed HTTP request: %s", message)
            phrase = http.HTTPStatus(http_status).phrase if http_status in _HTTP_STATUSES else "Bad Request"
            details = f"Malformed HTTP request: {phrase}"
        return _answer_and_close(http_status, details)


def _answer_and_close(http_status: int, details: str) -> web.Response:
    response = web.Response(status=http_status, body=error_json(details), headers={"Content-Type": JSON})
    response.force_close()
    return response
