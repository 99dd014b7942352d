"""The one load driver: closed loop or open loop, over any transport, with one record per call.

- **Closed loop** (``Load(transport, concurrency=N)``): N workers, each with its own
  connection, each sending the next request when the last one returns.
- **Open loop** (``Load(transport, concurrency=N, rate=R)``): one scheduler sends at R
  requests/s whatever the answers (or at the times ``schedule(i)`` gives, e.g. a recorded
  capture's inter-arrival times: ``loadtest.replay``); at most N are in flight (a worker thread each, started
  as needed, unless the connection can start a call without blocking: ``Connection.start``).
  Latency counts from each request's *scheduled* start, so a slow server cannot hide
  queueing behind the generator (no coordinated omission). A request dispatched more than
  10 ms after its schedule counts as ``late`` (the generator, not the server, fell behind;
  with ``catch_up=False`` the schedule then moves on instead of sending the missed requests
  in a burst: a client that sends every 1/R s). When N are in flight the next request
  waits for a slot (``when_full="wait"``), or the loop stops sending and sets ``overflowed``
  (``when_full="stop"``: a server that queues without bound cannot make the caller run away).

A **transport** is any ``Callable[[], Connection]``: it is called once per worker thread,
and the ``Connection`` it returns sends one request per ``send()`` call (blocking) and is
closed when the load stops. ``grpc_transport`` (a bytes-in/bytes-out stub, no client-side
protobuf work), ``http_transport`` (one keep-alive ``http.client`` connection) and
``call_transport`` (any callable: an SDK's ``predict``, an official stub, an in-process
``Servable`` call) cover what this codebase drives. A ``send`` that raises counts as an
error: ``CallFailed`` names its kind; a ``grpc.RpcError`` is recorded by its status code.

Every call appends one ``Record`` to ``Load.records`` (one list; ``list.append`` is
atomic), which a caller may slice by index while the load runs. ``measure`` runs one
load for a warmup and a timed window and returns the window's figures, with the CPU the
server's process tree and this process used in it (``loadtest.procfs``).
"""
from __future__ import annotations

import functools
import http.client
import itertools
import ssl
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, NamedTuple, Optional, Sequence

import grpc
import numpy as np

from loadtest.procfs import tree_cpu_seconds

if TYPE_CHECKING:
    from pathlib import Path

    from loadtest.payloads import Payload
    from serving.client import Connection as ClientConnection   # the SDK's: credentials, TLS

__all__ = ["CallFailed", "Connection", "Done", "Load", "Record", "Transport", "Window", "call_transport", "clock",
           "future_done", "grpc_transport", "http_transport", "measure", "percentile", "transport_for"]

clock = time.perf_counter
"""The driver's clock: every ``Record`` time is on it."""

LATE_S = 0.010


class Record(NamedTuple):
    """One call: when it ended (``clock()``), its latency (s), and its error kind (None when it succeeded).

    In the open loop ``latency`` counts from the call's schedule, and ``waited`` is how long after its
    schedule it was actually sent (the generator's delay, 0 in the closed loop): ``latency - waited``
    is the server's answer time alone.
    """

    end: float
    latency: float
    error: Optional[str] = None
    details: str = ""
    waited: float = 0.0

    @property
    def sent(self) -> float:
        """When the call was scheduled (open loop) or sent (closed loop)."""
        return self.end - self.latency


class CallFailed(Exception):
    """A call that did not succeed; ``kind`` is what the records count (``HTTP 503``, ``CONNECTION``)."""

    def __init__(self, kind: str, details: str = "") -> None:
        super().__init__(kind if not details else f"{kind}: {details}")
        self.kind, self.details = kind, details


Done = Callable[[Optional[BaseException]], None]


@dataclass
class Connection:
    """One worker's connection: ``send()`` makes one request (blocking) and raises when it failed.

    ``start(done)``, when given, begins one request without blocking and calls ``done(None)`` or
    ``done(error)`` when it ends (on any thread); the open loop then needs no thread per call in flight.
    """

    # called with no argument; under a Load's ``schedule``, with the request's index (the driver's transports
    # take both; a send that takes no index serves unscheduled loads only): two signatures, hence ``...``
    send: Callable[..., object]
    close: Callable[[], None] = lambda: None
    start: Optional[Callable[[Done], None]] = None


Transport = Callable[[], Connection]
"""Called once per worker thread; returns that worker's ``Connection``."""


def _failure(error: BaseException) -> tuple[str, str]:
    if isinstance(error, CallFailed):
        return error.kind, error.details
    if isinstance(error, grpc.RpcError):
        return error.code().name, error.details() or ""
    return type(error).__name__, str(error)


# ---------------------------------------------------------------------------- transports

def _picker(request: "bytes | Sequence[bytes]") -> Callable[[Optional[int]], bytes]:
    """``pick(i)``: request ``i`` of a recorded mix (None: the next one, shared by every worker), or the one request."""
    if isinstance(request, bytes):
        only = request

        def pick_only(index: Optional[int] = None) -> bytes:
            return only

        return pick_only
    requests, shared = tuple(request), itertools.count()
    if not requests:
        raise ValueError("a request mix needs at least one request")

    def pick_in_turn(index: Optional[int] = None) -> bytes:
        return requests[(next(shared) if index is None else index) % len(requests)]

    return pick_in_turn


def grpc_transport(target: str, method: str, request: "bytes | Sequence[bytes]", *, timeout: float = 30.0,
                   credentials: Optional[grpc.ChannelCredentials] = None,
                   metadata: Sequence[tuple[str, str]] = ()) -> Transport:
    """A new channel per worker (its own TCP connection, like a separate client); pre-serialized
    ``request`` bytes on ``method`` (a sequence: a recorded mix, sent in turn, or by the index a
    schedule gives); ``credentials`` makes it TLS, ``metadata`` goes with every call."""
    options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1),
               ("grpc.use_local_subchannel_pool", 1)]
    pick = _picker(request)

    def connect() -> Connection:
        channel = (grpc.secure_channel(target, credentials, options) if credentials is not None
                   else grpc.insecure_channel(target, options=options))
        call = channel.unary_unary(method)  # bytes in, bytes out
        sent_metadata = tuple(metadata) or None

        def start(done: Done) -> None:
            call.future(pick(None), timeout=timeout, metadata=sent_metadata).add_done_callback(future_done(done))

        def send(index: Optional[int] = None) -> bytes:
            return call(pick(index), timeout=timeout, metadata=sent_metadata)

        return Connection(send, channel.close, start)

    return connect


def http_transport(base_url: str, path: str, body: "bytes | Sequence[bytes]", *, timeout: float = 30.0,
                   headers: Optional[dict[str, str]] = None,
                   ssl_context: Optional[ssl.SSLContext] = None) -> Transport:
    """One keep-alive HTTP/1.1 connection per worker (TLS for ``https://``); POSTs ``body`` to ``path``.

    A non-200 answer raises ``CallFailed("HTTP nnn")``; a broken connection ``CallFailed("CONNECTION")``
    and reconnects on the next request.
    """
    parsed = urllib.parse.urlsplit(base_url if "//" in base_url else f"http://{base_url}")
    host = parsed.hostname
    if not host:   # refused here: a worker's connect() would fail on its own thread, past the caller
        raise ValueError(f"the REST base URL {base_url!r} names no host")
    sent = {"Content-Type": "application/json", **(headers or {})}
    pick = _picker(body)

    def connect() -> Connection:
        conn: http.client.HTTPConnection
        if parsed.scheme == "https":
            conn = http.client.HTTPSConnection(host, parsed.port, timeout=timeout, context=ssl_context)
        else:
            conn = http.client.HTTPConnection(host, parsed.port, timeout=timeout)

        def send(index: Optional[int] = None) -> bytes:
            try:
                conn.request("POST", path, body=pick(index), headers=sent)
                response = conn.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                raise CallFailed("CONNECTION") from None
            if response.status != 200:
                raise CallFailed(f"HTTP {response.status}", data[:200].decode(errors="replace"))
            return data

        return Connection(send, conn.close)

    return connect


def future_done(done: Done) -> Callable[[grpc.Future], None]:
    """A gRPC future's done-callback that hands ``done`` the call's error (None when it succeeded)."""
    def callback(future: grpc.Future) -> None:
        try:
            failure = future.exception()
        except grpc.FutureCancelledError as cancelled:
            failure = CallFailed("CANCELLED", str(cancelled))
        done(failure)
    return callback


def call_transport(call: Callable[..., object], start: Optional[Callable[[Done], None]] = None) -> Transport:
    """Any callable as a transport, shared by every worker (an SDK client, a stub, an in-process call);
    ``start`` is its non-blocking form, if it has one (see ``Connection``). ``call`` is called with no argument,
    or, under a ``Load``'s ``schedule`` (a replay), with the index of the recorded request to send."""
    return lambda: Connection(call, start=start)


def transport_for(protocol: str, address: str, payload: Payload, timeout: float = 30.0,
                  connection: Optional[ClientConnection] = None) -> Transport:
    """``payload``'s prebuilt request (or its recorded mix, in turn) over ``grpc`` (``address`` = HOST:PORT) or
    ``rest`` (a base URL), with
    ``connection``'s TLS (gRPC: TLS when it names a CA or a client pair) and credential headers."""
    headers = _auth_headers(connection)
    if protocol == "grpc":
        requests = [r.grpc_request for r in payload.mix] if payload.mix else payload.grpc_request
        return grpc_transport(address, payload.grpc_method, requests, timeout=timeout,
                              credentials=_grpc_credentials(connection), metadata=tuple(headers.items()))
    if protocol == "rest":
        bodies = [r.rest_body for r in payload.mix] if payload.mix else payload.rest_body
        return http_transport(address, payload.rest_path, bodies, timeout=timeout, headers=headers,
                              ssl_context=_ssl_context(connection))
    raise ValueError(f"protocol must be grpc or rest, got {protocol!r}")


def _pem(path: Optional[Path]) -> Optional[bytes]:
    return open(path, "rb").read() if path else None


def _grpc_credentials(connection: Optional[ClientConnection]) -> Optional[grpc.ChannelCredentials]:
    if connection is None or not (connection.root_certificates or connection.client_cert):
        return None
    return grpc.ssl_channel_credentials(_pem(connection.root_certificates), _pem(connection.client_key),
                                        _pem(connection.client_cert))


def _ssl_context(connection: Optional[ClientConnection]) -> Optional[ssl.SSLContext]:
    if connection is None or not (connection.root_certificates or connection.client_cert):
        return None
    context = ssl.create_default_context(cafile=str(connection.root_certificates) if connection.root_certificates
                                         else None)
    if connection.client_cert:
        context.load_cert_chain(str(connection.client_cert), str(connection.client_key) if connection.client_key
                                else None)
    return context


def _auth_headers(connection: Optional[ClientConnection]) -> dict[str, str]:
    headers = {}
    if connection is not None and connection.api_key:
        headers["x-api-key"] = connection.api_key
    if connection is not None and connection.bearer_token:
        headers["authorization"] = f"Bearer {connection.bearer_token}"
    return headers


# ---------------------------------------------------------------------------- the loops

@dataclass
class Load:
    """A running load; a context manager (``start()`` / ``stop()``). See the module docstring."""

    transport: Transport
    concurrency: int
    rate: Optional[float] = None
    duration: Optional[float] = None     # open loop: stop sending after this many seconds
    when_full: str = "wait"              # open loop at ``concurrency`` in flight: "wait" or "stop"
    late_after: float = LATE_S           # open loop: a dispatch this many s after its schedule is late
    catch_up: bool = True                # open loop: False moves the schedule on a late dispatch (no burst)
    schedule: Optional[Callable[[int], Optional[float]]] = None  # open loop: request i's start, s after the first
    # (None: the schedule ended); with it, ``send(i)`` is called with the request's index (``Scheduled``)
    on_record: Callable[[Record], None] = lambda record: None   # called (on the caller's thread) per call
    records: list[Record] = field(default_factory=list, init=False)
    late: int = field(default=0, init=False)
    sent: int = field(default=0, init=False)
    overflowed: bool = field(default=False, init=False)
    stopped_sending: threading.Event = field(default_factory=threading.Event, init=False)  # open loop
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _threads: list[threading.Thread] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.schedule is not None and self.rate is not None:
            raise ValueError("give a rate or a schedule, not both")
        if self.rate is not None and self.rate <= 0:
            raise ValueError(f"rate must be above 0 requests/s, got {self.rate}")
        if self.when_full not in ("wait", "stop"):
            raise ValueError(f"when_full must be wait or stop, got {self.when_full!r}")

    def start(self) -> "Load":
        if self.rate is None and self.schedule is None:
            ready = threading.Barrier(self.concurrency + 1)
            self._threads = [threading.Thread(target=self._closed, args=(ready,), daemon=True)
                             for _ in range(self.concurrency)]
            for thread in self._threads:
                thread.start()
            ready.wait()
        else:
            self._slots = threading.BoundedSemaphore(self.concurrency)
            self._idle = threading.Event()
            self._threads = [threading.Thread(target=self._open, daemon=True)]
            self._threads[0].start()
        return self

    def stop(self, timeout: float = 60.0) -> None:
        """Stop sending; wait up to ``timeout`` s for the calls in flight to end."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)

    def wait_sent(self, timeout: Optional[float] = None) -> bool:
        """Open loop: wait until it stopped sending (its ``duration`` passed, or it overflowed) and every
        call it sent ended; whether that happened within ``timeout``."""
        self._threads[0].join(timeout)
        return not self._threads[0].is_alive()

    @property
    def in_flight(self) -> int:
        return self.sent - len(self.records)

    def __enter__(self) -> "Load":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _record(self, start: float, sent: float, failure: Optional[BaseException]) -> None:
        error, details = (None, "") if failure is None else _failure(failure)
        end = clock()
        record = Record(end, end - start, error, details, max(0.0, sent - start))
        self.records.append(record)
        self.on_record(record)

    def _call(self, send: Callable[[], object], start: float) -> None:
        sent = clock()
        try:
            send()
        except Exception as exc:  # noqa: BLE001 - a load counts every failure, whatever it is
            self._record(start, sent, exc)
        else:
            self._record(start, sent, None)

    def _closed(self, ready: threading.Barrier) -> None:
        connection = self.transport()
        ready.wait()
        try:
            while not self._stop.is_set():
                self._call(connection.send, clock())
        finally:
            connection.close()

    def _open(self) -> None:
        first = self.transport()
        local, opened, lock = threading.local(), [first], threading.Lock()

        def worker_send() -> Callable[..., object]:
            if not hasattr(local, "connection"):
                local.connection = self.transport()
                with lock:
                    opened.append(local.connection)
            return local.connection.send

        def run(scheduled: float, ticket: int) -> None:
            try:
                send = worker_send()
                self._call(send if self.schedule is None else functools.partial(send, ticket), scheduled)
            finally:
                self._slots.release()

        def ended(scheduled: float, sent: float, failure: Optional[BaseException]) -> None:
            try:
                self._record(scheduled, sent, failure)
            finally:
                self._slots.release()

        began = t0 = clock() + 0.05
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="open-loop") as pool:
            for ticket in itertools.count():
                offset = (self.schedule(ticket) if self.schedule is not None
                          else ticket / self.rate if self.rate is not None else None)  # start(): one of them is set
                if offset is None:
                    break
                scheduled = t0 + offset
                # (a nanosecond of slack: began + 20 / 200 - began may come out a hair under 0.1)
                if self.duration is not None and scheduled - began >= self.duration - 1e-9:
                    break
                if self._stop.wait(max(0.0, scheduled - clock())):
                    break
                if not self._slots.acquire(blocking=self.when_full == "wait"):
                    self.overflowed = True
                    break
                if clock() - scheduled > self.late_after:
                    self.late += 1
                    if not self.catch_up:   # the next call is due 1/rate s from now, not at once
                        t0 = clock() - offset
                self.sent += 1
                if first.start is None or self.schedule is not None:
                    pool.submit(run, scheduled, ticket)
                else:   # no thread per call: the transport calls back when the call ends
                    first.start(functools.partial(ended, scheduled, clock()))
            self.stopped_sending.set()
            for _ in range(self.concurrency):   # every slot back: every call has ended
                self._slots.acquire()
        for connection in opened:
            connection.close()


# ---------------------------------------------------------------------------- one measured window

@dataclass
class Window:
    """The calls that ended inside one timed window, and the CPU used in it."""

    records: list[Record]
    seconds: float
    client_cpu: float                  # this process's CPU seconds
    server_cpu: Optional[float] = None  # the server's process tree's CPU seconds (None: not measured)
    late: int = 0

    @property
    def latencies(self) -> list[float]:
        return [r.latency for r in self.records if r.error is None]

    @property
    def requests(self) -> int:
        return sum(r.error is None for r in self.records)

    @property
    def errors(self) -> int:
        return sum(r.error is not None for r in self.records)

    @property
    def first_error(self) -> Optional[str]:
        return next((f"{r.error}: {r.details}" if r.details else r.error for r in self.records if r.error), None)

    @property
    def rate(self) -> float:
        """Successful calls per second."""
        return self.requests / self.seconds if self.seconds else float("nan")

    def percentile(self, q: float) -> float:
        """Latency percentile ``q`` of the successful calls, seconds (NaN without any)."""
        return percentile(self.latencies, q)

    def ms_per_request(self, cpu_seconds: Optional[float]) -> Optional[float]:
        return cpu_seconds * 1e3 / self.requests if cpu_seconds is not None and self.requests else None

    def __add__(self, other: "Window") -> "Window":
        server = None if self.server_cpu is None or other.server_cpu is None else self.server_cpu + other.server_cpu
        return Window(self.records + other.records, self.seconds + other.seconds,
                      self.client_cpu + other.client_cpu, server, self.late + other.late)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` (NaN for none)."""
    return float(np.percentile(values, q)) if len(values) else float("nan")


def measure(transport: Transport, concurrency: int, warmup: float, duration: float, *,
            rate: Optional[float] = None, server_pid: Optional[int] = None) -> Window:
    """``warmup`` s of load, then the calls that end within the next ``duration`` s, and the CPU
    that ``server_pid``'s process tree (when given) and this process used in that window."""
    with Load(transport, concurrency, rate) as load:
        load._stop.wait(warmup)   # the warmup's length, not an ordering of threads
        first, late = len(load.records), load.late
        server_before = tree_cpu_seconds(server_pid) if server_pid is not None else None
        client_before, begin = time.process_time(), clock()
        load._stop.wait(duration)
        end = clock()
        server_cpu = (tree_cpu_seconds(server_pid) - server_before
                      if server_pid is not None and server_before is not None else None)
        client_cpu = time.process_time() - client_before
        late = load.late - late
    records = [r for r in load.records[first:] if r.end <= end]
    return Window(records, end - begin, client_cpu, server_cpu, late)
