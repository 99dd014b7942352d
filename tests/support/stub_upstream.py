"""A stand-in for TF Serving's REST port that the gateway tests stop, start and hold (real sockets, a thread).

``GET /v1/models`` answers 400 as TF Serving does for a path without a model name (``Malformed
request``); ``GET /v1/models/<name>`` answers 200, after ``hold`` is cleared when it is set (a request
the test keeps in flight to fill a concurrency limit). Only for what the embedded server cannot do on
cue: be down, and hold a request.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

__all__ = ["StubUpstream", "send_json"]


def send_json(handler: BaseHTTPRequestHandler, status: int, body: dict) -> None:
    """Answer ``handler``'s request with ``body`` as JSON, its length given."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class StubUpstream:
    """``start()``/``stop()`` on one port; ``held`` counts requests waiting on ``release``."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.release = threading.Event()
        self.release.set()
        self.held = threading.Semaphore(0)
        self._server: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "StubUpstream":
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # a connection per request: none outlives stop() in nginx's pool

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path.rstrip("/") == "/v1/models":
                    self._answer(400, {"error": f"Malformed request: GET {self.path}"})
                    return
                if not stub.release.is_set():
                    stub.held.release()
                    stub.release.wait(60)
                self._answer(200, {"model_version_status": [{"version": "1", "state": "AVAILABLE"}]})

            def _answer(self, status: int, body: dict) -> None:
                send_json(self, status, body)

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self.release.set()
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(10)
            self._server = None
