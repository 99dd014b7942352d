"""The sweep's own load generator: plain threads, one connection each, prebuilt request bytes.

Closed loop (a fixed number of in-flight requests) or open loop (a fixed
request rate; latency counted from each request's scheduled start, so a slow
server cannot hide queueing behind the generator: no coordinated omission).

Each worker appends ``(end, latency, error)`` to its own list; the caller
reads them by time window while the load runs. gRPC calls use identity
serializers, so a request costs one C-level call and no Python protobuf work.
"""
from __future__ import annotations

import http.client
import itertools
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Callable, Optional

import grpc

from loadtest.payloads import Payload

__all__ = ["Record", "Load", "Transport", "grpc_transport", "rest_transport", "transport_for"]

# (end time from time.perf_counter(), latency seconds, error name or None)
Record = tuple[float, float, Optional[str]]
Send = Callable[[], None]
Transport = Callable[[], tuple[Send, Callable[[], None]]]  # → (send one request, close)


def grpc_transport(target: str, payload: Payload, timeout: float = 30.0) -> Transport:
    """One new channel per worker; ``send`` raises ``RuntimeError(code name)`` on a non-OK status."""

    def connect():
        channel = grpc.insecure_channel(target, options=[
            ("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1),
            ("grpc.use_local_subchannel_pool", 1)])  # its own TCP connection, like a separate client
        call = channel.unary_unary(payload.grpc_method)
        request = payload.grpc_request

        def send() -> None:
            try:
                call(request, timeout=timeout)
            except grpc.RpcError as error:
                raise RuntimeError(error.code().name) from None

        return send, channel.close

    return connect


def rest_transport(base_url: str, payload: Payload, timeout: float = 30.0) -> Transport:
    """One keep-alive HTTP/1.1 connection per worker (TLS for ``https://``).

    A non-200 answer raises ``RuntimeError("HTTP nnn")``.
    """
    parsed = urllib.parse.urlsplit(base_url if "//" in base_url else f"http://{base_url}")
    headers = {"Content-Type": "application/json"}
    connection = http.client.HTTPSConnection if parsed.scheme == "https" else http.client.HTTPConnection

    def connect():
        conn = connection(parsed.hostname, parsed.port, timeout=timeout)

        def send() -> None:
            try:
                conn.request("POST", payload.rest_path, body=payload.rest_body, headers=headers)
                response = conn.getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                conn.close()  # reconnects on the next request
                raise RuntimeError("CONNECTION") from None
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}")

        return send, conn.close

    return connect


def transport_for(protocol: str, address: str, payload: Payload, timeout: float = 30.0) -> Transport:
    if protocol == "grpc":
        return grpc_transport(address, payload, timeout)
    if protocol == "rest":
        return rest_transport(address, payload, timeout)
    raise ValueError(f"protocol must be grpc or rest, got {protocol!r}")


@dataclass
class Load:
    """A running load; a context manager. ``concurrency`` workers, or an open loop at ``rate``/s.

    In the open loop ``concurrency`` caps the requests in flight; a request
    that starts more than 10 ms after its schedule counts as ``late`` (the
    generator, not the server, was short of workers).
    """

    transport: Transport
    concurrency: int
    rate: Optional[float] = None
    records: list[list[Record]] = field(default_factory=list, init=False)
    late: int = field(default=0, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _threads: list[threading.Thread] = field(default_factory=list, init=False)

    def start(self) -> "Load":
        self._t0 = time.perf_counter() + 0.05
        self._tickets = itertools.count()
        ready = threading.Barrier(self.concurrency + 1)
        for _ in range(self.concurrency):
            records: list[Record] = []
            self.records.append(records)
            thread = threading.Thread(target=self._work, args=(records, ready), daemon=True)
            thread.start()
            self._threads.append(thread)
        ready.wait()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def __enter__(self) -> "Load":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _work(self, records: list[Record], ready: threading.Barrier) -> None:
        send, close = self.transport()
        ready.wait()
        clock, stop, append = time.perf_counter, self._stop.is_set, records.append
        try:
            while not stop():
                start = clock() if self.rate is None else self._wait_for_slot(clock)
                if start is None:
                    break
                error = None
                try:
                    send()
                except RuntimeError as exc:
                    error = str(exc)
                end = clock()
                append((end, end - start, error))
        finally:
            close()

    def _wait_for_slot(self, clock) -> Optional[float]:
        scheduled = self._t0 + next(self._tickets) / self.rate
        delay = scheduled - clock()
        if delay > 0:
            if self._stop.wait(delay):
                return None
        elif delay < -0.010:
            self.late += 1
        return scheduled
