"""Stalled gRPC streams and idle connections, written with raw HTTP/2 frames (no HTTP/2 library).

``StalledConnection`` opens one TCP connection, sends the HTTP/2 preface and
then ``HEADERS`` frames for ``Predict`` with no ``DATA`` and no
``grpc-timeout``: each is a call whose request message never arrives. A
reader thread answers the server's SETTINGS and PINGs (so that the server
sees a live peer, not a broken one) and records how each stream ended
(``grpc-status`` trailers or ``RST_STREAM``) and whether the server sent
GOAWAY or closed the connection. HPACK is written as literal fields without
indexing, which every decoder must accept (RFC 7541 6.2.2).
"""
from __future__ import annotations

import socket
import struct
import threading
from typing import Optional

__all__ = ["StalledConnection", "PREDICT_PATH", "idle_connections"]

PREDICT_PATH = "/tensorflow.serving.PredictionService/Predict"
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _PING, _GOAWAY, _CONTINUATION = 0, 1, 3, 4, 6, 7, 9
_END_STREAM, _ACK, _END_HEADERS = 0x1, 0x1, 0x4


def _integer(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """HPACK integer (RFC 7541 5.1)."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append((value % 128) + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def _literal(name: str, value: str) -> bytes:
    """A literal header field without indexing, new name, no Huffman coding."""
    name_bytes, value_bytes = name.encode(), value.encode()
    return (b"\x00" + _integer(len(name_bytes), 7) + name_bytes + _integer(len(value_bytes), 7) + value_bytes)


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


class StalledConnection:
    """One HTTP/2 connection to ``host:port`` whose streams send headers and nothing else; a context manager."""

    def __init__(self, host: str, port: int, path: str = PREDICT_PATH) -> None:
        self._sock = socket.create_connection((host, port), timeout=30)
        self._authority = f"{host}:{port}"
        self._path = path
        self._next_stream = 1
        self._lock = threading.Lock()
        self.ended: dict[int, str] = {}        # stream id -> "status=<n>" or "rst=<code>"
        self.goaway = threading.Event()
        self.closed = threading.Event()
        self.changed = threading.Condition()
        self._sock.sendall(_PREFACE + _frame(_SETTINGS, 0, 0))
        self._reader = threading.Thread(target=self._read, name="h2-stall-reader", daemon=True)
        self._reader.start()

    def open_streams(self, count: int) -> list[int]:
        """Send ``count`` HEADERS frames (no END_STREAM, no DATA); returns their stream ids."""
        block = b"".join(_literal(k, v) for k, v in (
            (":method", "POST"), (":scheme", "http"), (":path", self._path), (":authority", self._authority),
            ("content-type", "application/grpc"), ("te", "trailers")))
        ids, frames = [], []
        with self._lock:
            for _ in range(count):
                ids.append(self._next_stream)
                frames.append(_frame(_HEADERS, _END_HEADERS, self._next_stream, block))
                self._next_stream += 2
            self._sock.sendall(b"".join(frames))
        return ids

    def wait_ended(self, count: int, timeout: float) -> bool:
        """Until ``count`` streams have ended (or the connection closed); False after ``timeout`` s."""
        with self.changed:
            return self.changed.wait_for(lambda: len(self.ended) >= count or self.closed.is_set(), timeout)

    def _read(self) -> None:
        buffer = b""
        try:
            while True:
                chunk = self._sock.recv(65536)
                if not chunk:
                    break
                buffer += chunk
                while len(buffer) >= 9:
                    length = int.from_bytes(buffer[:3], "big")
                    if len(buffer) < 9 + length:
                        break
                    kind, flags = buffer[3], buffer[4]
                    stream = int.from_bytes(buffer[5:9], "big") & 0x7FFFFFFF
                    payload, buffer = buffer[9:9 + length], buffer[9 + length:]
                    self._on_frame(kind, flags, stream, payload)
        except OSError:
            pass
        finally:
            self.closed.set()
            with self.changed:
                self.changed.notify_all()

    def _on_frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        reply: Optional[bytes] = None
        if kind == _SETTINGS and not flags & _ACK:
            reply = _frame(_SETTINGS, _ACK, 0)
        elif kind == _PING and not flags & _ACK:
            reply = _frame(_PING, _ACK, 0, payload)
        elif kind == _GOAWAY:
            self.goaway.set()
        elif kind == _RST_STREAM:
            self._end(stream, f"rst={int.from_bytes(payload[:4], 'big')}")
        elif kind == _HEADERS and flags & _END_STREAM:
            self._end(stream, "status")   # trailers (HPACK-compressed; their grpc-status is not decoded)
        if reply is not None:
            with self._lock:
                try:
                    self._sock.sendall(reply)
                except OSError:
                    pass

    def _end(self, stream: int, how: str) -> None:
        with self.changed:
            self.ended.setdefault(stream, how)
            self.changed.notify_all()

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self._reader.join(5)

    def __enter__(self) -> "StalledConnection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def idle_connections(host: str, port: int, count: int, *, preface: bool = True) -> list[socket.socket]:
    """``count`` TCP connections that send the HTTP/2 preface (or nothing) and then stay idle.

    A connection the server refuses or closes at once is still returned (the caller checks which are open).
    """
    sockets = []
    for _ in range(count):
        try:
            sock = socket.create_connection((host, port), timeout=5)
        except OSError:
            break
        if preface:
            try:
                sock.sendall(_PREFACE + _frame(_SETTINGS, 0, 0))
            except OSError:
                pass
        sockets.append(sock)
    return sockets
