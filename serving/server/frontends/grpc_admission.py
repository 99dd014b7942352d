"""The gRPC server's thread pool: a call takes a thread only once its request message has arrived.

How grpcio's sync server (``grpc/_server.py``, 1.85) handles a call: gRPC
core hands the call to Python when its HEADERS arrive; on the polling
thread grpcio then finds the handler (server interceptors run here, seeing
only the method and metadata), counts the call against
``maximum_concurrent_rpcs`` and submits ``_unary_response_in_pool`` to the
thread pool at once. That job's first step (``_unary_request``) starts the
receive of the request message and blocks its thread until the message
arrives, with no timeout. So a stream that sends HEADERS and no DATA holds a
worker thread and an admission slot for as long as the client keeps it open:
8 such streams (the default 8 threads) stopped every other call. grpcio
offers no read timeout, and interceptors run before the message is read, so
neither can tell a stalled call from a slow handler.

``MessageFirstExecutor`` is the pool grpcio submits to. For a unary request
(every TF Serving method) it does not start the job: it starts the receive
of the message itself, on the polling thread, with grpcio's own receive
callback, and starts the job only when the message is there, handing it the
message. Meanwhile the call holds no thread and no admission slot:

- admission (``max_concurrent_rpcs``, grpcio's "Concurrent RPC limit
  exceeded!" RESOURCE_EXHAUSTED) counts the calls whose message has arrived,
  running or waiting for a thread; grpcio's own bound is not used;
- a call whose message has not arrived within ``read_timeout`` seconds gets
  DEADLINE_EXCEEDED from the server (a watchdog thread looks every
  ``read_timeout / 4`` seconds, at most 1 s);
- how many such calls one client holds is bounded per connection by HTTP/2's
  SETTINGS_MAX_CONCURRENT_STREAMS (``grpc.max_concurrent_streams``, set by
  the front-end), and the connections by the port's connection cap.

This uses grpcio's private ``_server`` helpers (the receive callback, the
abort, the RPC state's condition), all through ``grpcio_internals``, which
checks the installed grpcio against the pin at import; where they are
missing (``grpcio_internals.SUPPORTED`` is false) the front-end uses a plain
thread pool and grpcio's own ``maximum_concurrent_rpcs`` instead. A job that
is not a unary-request call is submitted unchanged.
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent import futures
from typing import Any, Callable, Optional

from serving.server.frontends import grpcio_internals as internals
from serving.server.frontends.grpcio_internals import Call, RpcEvent, RpcState, StatusCode

__all__ = ["MessageFirstExecutor", "FallbackExecutor", "CONCURRENCY_EXCEEDED", "SHUTTING_DOWN", "read_timeout_details"]

logger = logging.getLogger(__name__)

CONCURRENCY_EXCEEDED = b"Concurrent RPC limit exceeded!"   # grpcio's own words for maximum_concurrent_rpcs
SHUTTING_DOWN = b"The server is shutting down; send the call to another replica"


def read_timeout_details(seconds: float) -> str:
    return (f"The request message did not arrive within {seconds:g} s of the call's start "
            f"(embedded server flag --grpc_read_timeout_seconds)")


class _Waiting:
    """A call whose request message has not arrived yet."""

    __slots__ = ("call", "state", "deadline")

    def __init__(self, call: Call, state: RpcState, deadline: float) -> None:
        self.call, self.state, self.deadline = call, state, deadline


class _AdmittingExecutor(futures.ThreadPoolExecutor):
    """A thread pool that counts the calls it admitted until each has ended (``admitted``); ``_lock`` guards
    the count and whatever else a subclass keeps beside it."""

    def __init__(self, max_workers: int, *, thread_name_prefix: str = "grpc") -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
        self._lock = threading.Lock()
        self._admitted = 0

    def _admit(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> "futures.Future[Any]":
        with self._lock:
            self._admitted += 1
        job = super().submit(fn, *args, **kwargs)
        job.add_done_callback(self._release)
        return job

    def _release(self, _job: "futures.Future[Any]") -> None:
        with self._lock:
            self._admitted -= 1

    @property
    def admitted(self) -> int:
        """Calls admitted that are running or waiting for a thread."""
        with self._lock:
            return self._admitted


class MessageFirstExecutor(_AdmittingExecutor):
    """grpcio's thread pool that reads a unary call's request message before the call takes a thread.

    ``max_concurrent_rpcs`` (None: unbounded) bounds the calls whose message
    has arrived; ``read_timeout`` (None or 0: none) bounds the wait for the
    message. ``last_taken`` (``time.monotonic()``) says when grpcio last handed
    over a call; after ``refuse_new_calls()`` (a drain) every call is refused with
    UNAVAILABLE. ``start_watchdog()`` / ``shutdown()`` run the read-timeout watchdog.
    Thread-safe: grpcio calls ``submit`` and the receive callbacks on its polling thread.
    """

    last_taken = 0.0

    def __init__(self, max_workers: int, *, max_concurrent_rpcs: Optional[int] = None,
                 read_timeout: Optional[float] = None, thread_name_prefix: str = "grpc") -> None:
        super().__init__(max_workers, thread_name_prefix=thread_name_prefix)
        self._max_concurrent_rpcs = max_concurrent_rpcs
        self._read_timeout = read_timeout or None
        self._waiting: dict[int, _Waiting] = {}
        self._refusing = False
        self.refused_while_draining = 0
        self._stop = threading.Event()
        self._watchdog: Optional[threading.Thread] = None

    # -- what grpcio calls ------------------------------------------------------------------
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> "futures.Future[Any]":
        self.last_taken = time.monotonic()
        if internals.is_unary_request_job(args, kwargs):
            return self._after_message(fn, *args)
        return self._admit(fn, args, kwargs)

    def _after_message(self, run: Callable[..., None], in_pool: Callable[..., None], rpc_event: RpcEvent,
                       state: RpcState, behavior: Callable[..., Any],
                       _argument_thunk: Callable[[], object], deserializer: Optional[Callable[[bytes], Any]],
                       serializer: Optional[Callable[[Any], bytes]]) -> "futures.Future[None]":
        """Start receiving the message (grpcio holds ``state.condition``); the job starts when it is there.

        The returned future, which grpcio waits on, is done when the call is.
        """
        call = rpc_event.call
        done: futures.Future[None] = futures.Future()
        done.set_running_or_notify_cancel()
        receive = internals.receive_message(state, call, deserializer)
        key = id(state)

        def on_message(event: RpcEvent) -> object:
            with self._lock:
                self._waiting.pop(key, None)
            with state.condition:
                outcome = receive(event)   # sets state.request, or state.client when closed or cancelled
                request, state.request = state.request, None
                if request is None:
                    if internals.client_closed(state) and not state.statused:
                        internals.abort(state, call, internals.UNIMPLEMENTED,
                                           f'"{rpc_event.call_details.method}" requires exactly one request '
                                           f'message.'.encode())
                    admitted = False
                else:
                    refusal = self._take_slot()
                    admitted = refusal is None
                    if refusal is not None and internals.is_active(state):
                        internals.abort(state, call, *refusal)
            if not admitted:
                done.set_result(None)
                return outcome
            job = super(MessageFirstExecutor, self).submit(
                run, in_pool, rpc_event, state, behavior, lambda: request, deserializer, serializer)
            def finished(_job: futures.Future) -> None:
                self._release(_job)
                done.set_result(None)

            job.add_done_callback(finished)
            return outcome

        if self._read_timeout is not None:
            with self._lock:
                self._waiting[key] = _Waiting(call, state, time.monotonic() + self._read_timeout)
        internals.start_receive(call, state, on_message)
        return done

    def _take_slot(self) -> Optional[tuple[StatusCode, bytes]]:
        """None when the call is admitted (and counted), else the status code and details that refuse it."""
        with self._lock:
            if self._refusing:
                self.refused_while_draining += 1
                return internals.UNAVAILABLE, SHUTTING_DOWN
            if self._max_concurrent_rpcs is not None and self._admitted >= self._max_concurrent_rpcs:
                return internals.RESOURCE_EXHAUSTED, CONCURRENCY_EXCEEDED
            self._admitted += 1
            return None

    def refuse_new_calls(self) -> None:
        """From now on a call whose message arrives gets UNAVAILABLE (``SHUTTING_DOWN``); admitted calls run on.

        The drain's second step: a refusal costs the polling thread next to
        nothing, so gRPC core's queue of calls grpcio has not taken empties,
        and each client learns at once, with a status it may retry elsewhere,
        that this server is going away.
        """
        with self._lock:
            self._refusing = True

    @property
    def admitted(self) -> int:
        """Calls whose message has arrived and that are running or waiting for a thread."""
        return super().admitted

    # -- the read-timeout watchdog ----------------------------------------------------------
    def start_watchdog(self) -> None:
        if self._read_timeout is None or self._watchdog is not None:
            return
        self._watchdog = threading.Thread(target=self._watch, name="grpc-read-timeout", daemon=True)
        self._watchdog.start()

    def _watch(self) -> None:
        assert self._read_timeout is not None
        period = min(1.0, self._read_timeout / 4)
        details = read_timeout_details(self._read_timeout).encode()
        while not self._stop.wait(period):
            now = time.monotonic()
            with self._lock:
                keys = [key for key, waiting in self._waiting.items() if waiting.deadline <= now]
                late = [self._waiting.pop(key) for key in keys]
            for waiting in late:
                with waiting.state.condition:
                    if internals.is_active(waiting.state):
                        internals.abort(waiting.state, waiting.call, internals.DEADLINE_EXCEEDED, details)
            if late:
                logger.warning("%d gRPC call(s) cancelled: %s", len(late), details.decode())

    @property
    def waiting_for_message(self) -> int:
        """Calls whose request message has not arrived (and that the watchdog watches)."""
        with self._lock:
            return len(self._waiting)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._stop.set()
        if self._watchdog is not None:
            self._watchdog.join(5)
        super().shutdown(wait=wait, cancel_futures=cancel_futures)


class FallbackExecutor(_AdmittingExecutor):
    """The pool used when ``grpcio_internals.SUPPORTED`` is false (a grpcio without the private names
    ``MessageFirstExecutor`` needs): grpcio's own admission (``maximum_concurrent_rpcs``, given to
    ``grpc.server``), no read timeout, and no refusal while draining. Same interface as ``MessageFirstExecutor``.
    """

    last_taken = 0.0
    refused_while_draining = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> "futures.Future[Any]":
        self.last_taken = time.monotonic()
        return self._admit(fn, args, kwargs)

    def refuse_new_calls(self) -> None:
        """Nothing to do: without grpcio's internals a call cannot be refused before it takes a thread."""

    def start_watchdog(self) -> None:
        """Nothing to watch: without grpcio's internals the message is read on the call's own thread."""
