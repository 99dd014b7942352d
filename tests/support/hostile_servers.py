"""Servers that misbehave on purpose, on free ports: slow, huge, compressed or malformed answers.

Standard library and grpcio only (no ``serving`` import): the same servers measure the SDK before and
after a change. Each server records what it was asked (``calls``) and is started and stopped explicitly.
"""
from __future__ import annotations

import collections
import gzip
import http.server
import io
import json
import socketserver
import struct
import threading
from concurrent import futures
from typing import Callable, Optional

import grpc

__all__ = ["TrickleHttpServer", "BigHttpServer", "FlakyGrpcServer", "tensor_bomb_predict_response",
           "gzip_bomb", "METADATA_JSON"]

# GetModelMetadata's REST answer for a model with no signatures: the client then sends inputs as given.
METADATA_JSON = json.dumps({"model_spec": {"name": "m", "version": "1"},
                            "metadata": {"signature_def": {"signature_def": {}}}}).encode()


class _Http(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _HttpServer:
    """A threaded HTTP server on 127.0.0.1 and a free port; ``handle(handler)`` answers every request."""

    def __init__(self) -> None:
        owner = self
        self.calls: collections.Counter = collections.Counter()
        self.first_request = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self._serve()

            def do_POST(self) -> None:
                self._serve()

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                owner.calls[self.path] += 1
                owner.first_request.set()
                try:
                    owner.handle(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self._server = _Http(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def handle(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class TrickleHttpServer(_HttpServer):
    """Answers every request one byte every ``interval`` seconds, the status line included, until
    ``stop_trickling`` is set (or ``limit`` bytes were sent)."""

    def __init__(self, interval: float = 0.5, limit: int = 10_000) -> None:
        super().__init__()
        self.interval, self.limit = interval, limit
        self.stop_trickling = threading.Event()

    def handle(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        body = b" " * self.limit
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        for byte in head.encode() + body:
            if self.stop_trickling.wait(self.interval):
                return
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()


class BigHttpServer(_HttpServer):
    """Answers metadata with ``METADATA_JSON`` and everything else with ``body`` (bytes, or a callable
    writing to the socket), with ``headers``."""

    def __init__(self, body: bytes | Callable[[object], None], headers: Optional[dict[str, str]] = None,
                 length: Optional[int] = None) -> None:
        super().__init__()
        self.body, self.headers, self.length = body, headers or {}, length

    def handle(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        if handler.path.endswith("/metadata"):
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(METADATA_JSON)))
            handler.end_headers()
            handler.wfile.write(METADATA_JSON)
            return
        handler.send_response(200)
        for name, value in self.headers.items():
            handler.send_header(name, value)
        size = self.length if self.length is not None else len(self.body)
        handler.send_header("Content-Length", str(size))
        handler.end_headers()
        if callable(self.body):
            self.body(handler.wfile)
        else:
            handler.wfile.write(self.body)


def gzip_bomb(inflated_bytes: int) -> bytes:
    """A gzip body of a JSON predict answer that inflates to about ``inflated_bytes``."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=9) as zipped:
        zipped.write(b'{"predictions": [')
        chunk = b"0," * (1 << 20)
        for _ in range(max(1, inflated_bytes // len(chunk))):
            zipped.write(chunk)
        zipped.write(b"0]}")
    return buffer.getvalue()


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def tensor_bomb_predict_response(shape: tuple[int, ...] = (600_000_000, 2), values: tuple[float, ...] = (1.0, 2.0),
                                 output: str = "y") -> bytes:
    """A serialized PredictResponse whose output is a DT_FLOAT TensorProto holding ``values`` (float_val)
    shaped ``shape``: a few bytes on the wire, billions of elements if padded."""
    dims = b"".join(_field(2, _varint(1 << 3 | 0) + _varint(size)) for size in shape)
    tensor = (_varint(1 << 3 | 0) + _varint(1)                         # dtype: DT_FLOAT
              + _field(2, dims)                                        # tensor_shape
              + _field(5, b"".join(struct.pack("<f", v) for v in values)))  # float_val (packed)
    entry = _field(1, output.encode()) + _field(2, tensor)
    return _field(1, entry)                                            # outputs map


class FlakyGrpcServer:
    """A gRPC server answering any method with ``answers[method]`` (bytes, or a grpc.StatusCode to abort
    with), after ``failures[method]`` UNAVAILABLE refusals; counts calls per method."""

    def __init__(self, answers: dict[str, object], failures: Optional[dict[str, int]] = None,
                 delays: Optional[dict[str, float]] = None) -> None:
        self.answers, self.failures = answers, collections.Counter(failures or {})
        self.delays = delays or {}
        self.calls: collections.Counter = collections.Counter()
        self.release = threading.Event()
        owner = self

        class Handler(grpc.GenericRpcHandler):
            def service(self, details):
                method = details.method

                def unary(request: bytes, context: grpc.ServicerContext) -> bytes:
                    owner.calls[method] += 1
                    if owner.failures[method] > 0:
                        owner.failures[method] -= 1
                        context.abort(grpc.StatusCode.UNAVAILABLE, "try again")
                    delay = owner.delays.get(method)
                    if delay:
                        owner.release.wait(delay)
                    answer = owner.answers.get(method, b"")
                    if isinstance(answer, grpc.StatusCode):
                        context.abort(answer, "refused")
                    return answer
                return grpc.unary_unary_rpc_method_handler(unary)

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[Handler()],
                                   options=[("grpc.max_send_message_length", 2**31 - 1)])
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "FlakyGrpcServer":
        self._server.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self._server.stop(None)
