"""The one door to httpcore's internals: a deadline for a whole synchronous REST request.

httpx's timeouts bound each socket operation, not a request: a server that
sends one byte every 0.5 s, status line included, keeps a request with a 2 s
read timeout open for as long as it likes. ``deadline(seconds)`` sets the end
of the current request (a context variable), and ``enforce_deadlines(client)``
wraps the network backend of every connection pool of an ``httpx.Client`` so
that each connect, read and write waits at most until that end, then fails as
a timeout (``httpx.ReadTimeout``, ...), which the client reports as
``DeadlineExceeded``.

httpx has no public hook for this: the pool's ``_network_backend`` is
replaced here and nowhere else. Checked against httpx 0.28 / httpcore 1.0;
if a later release renames it, ``enforce_deadlines`` raises at client
construction saying so (pin ``httpcore<2`` or update this module).
"""
from __future__ import annotations

import contextvars
import time
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import httpcore

__all__ = ["deadline", "enforce_deadlines"]

_DEADLINE: contextvars.ContextVar[Optional[float]] = contextvars.ContextVar("tfs_http_deadline", default=None)


@contextmanager
def deadline(seconds: float) -> Iterator[float]:
    """Every socket operation of this thread's requests inside ends by ``seconds`` from now; yields that end."""
    end = time.monotonic() + seconds
    token = _DEADLINE.set(end)
    try:
        yield end
    finally:
        _DEADLINE.reset(token)


def _clamp(timeout: Optional[float], error: type[Exception]) -> Optional[float]:
    end = _DEADLINE.get()
    if end is None:
        return timeout
    remaining = end - time.monotonic()
    if remaining <= 0:
        raise error("the call's deadline passed")
    return remaining if timeout is None else min(timeout, remaining)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: Optional[float] = None) -> bytes:
        return self._stream.read(max_bytes, _clamp(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: Optional[float] = None) -> None:
        self._stream.write(buffer, _clamp(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: Optional[str] = None,
                  timeout: Optional[float] = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname,
                                                      _clamp(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(self, host: str, port: int, timeout: Optional[float] = None, local_address: Optional[str] = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._backend.connect_tcp(host, port, _clamp(timeout, httpcore.ConnectTimeout),
                                                         local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: Optional[float] = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._backend.connect_unix_socket(path, _clamp(timeout, httpcore.ConnectTimeout),
                                                                 socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def enforce_deadlines(client: Any) -> None:
    """Wrap the network backend of every pool of ``client`` (an ``httpx.Client``) with the deadline."""
    transports = [client._transport, *client._mounts.values()]
    for transport in transports:
        pool = getattr(transport, "_pool", None) if transport is not None else None
        if pool is None or not hasattr(pool, "_network_backend"):
            raise RuntimeError(f"httpx {type(client).__module__} / httpcore {httpcore.__version__}: a connection "
                               "pool without _network_backend; serving.client._http_deadline needs updating")
        if not isinstance(pool._network_backend, _DeadlineBackend):
            pool._network_backend = _DeadlineBackend(pool._network_backend)
