"""The gRPC front-end's drain: what ``GrpcFrontend.stop(grace)`` does before grpc's own ``stop``.

gRPC core cancels, with CANCELLED, every call that has reached the server but
that grpc Python has not yet taken when the server shuts down, and every call
that reaches it after the shutdown began and before the client has read the
GOAWAY (``server.cc``: ``ZombifyPending`` and ``StartNewRpc`` kill the call
as a zombie; ``filter_stack_call.cc`` ``ExternalUnref`` ends a call whose
handler never ran with CANCELLED; a fix is proposed upstream, unmerged).
grpc Python takes calls one at a time, so a burst that arrived just before
SIGTERM came back CANCELLED, and so did calls clients kept sending on their
open connections. So the drain has four steps, and core's shutdown comes last:

1. the listening sockets are shut (new connections are refused at once);
2. the calls already sent on open connections are served as usual until none
   has come for ``CATCH_UP_QUIET_SECONDS`` (at most ``CATCH_UP_MAX_SECONDS``);
3. every call that still comes gets UNAVAILABLE at once
   (``MessageFirstExecutor.refuse_new_calls``), until none has come for
   ``CATCH_UP_QUIET_SECONDS`` (at most ``REFUSE_MAX_SECONDS``) and every
   admitted call has been answered (within ``grace``): core's queue of
   untaken calls empties and each client learns, with a status it may retry
   elsewhere, that this server is going away;
4. with nothing left to answer, the accepted connections are shut
   (``SHUT_RDWR``): a call still in transit on one fails at its client with
   UNAVAILABLE ("Socket closed") instead of reaching a server whose shutdown
   has begun.

Then grpc's ``stop(grace)`` sends GOAWAY to what is left and waits for it,
cancelling what runs after ``grace`` seconds (CANCELLED: a drain that ran out
of grace). Each step removes CANCELLED answers the ones before it leave
(``tests/security/test_sigterm.py``; measured: docs/operations.md).
"""
from __future__ import annotations

import logging
import time
from typing import Protocol, Sequence

from serving.server.frontends.socket_shutdown import shut_sockets

__all__ = ["DrainingExecutor", "drain", "CATCH_UP_QUIET_SECONDS", "CATCH_UP_MAX_SECONDS", "REFUSE_MAX_SECONDS"]

logger = logging.getLogger(__name__)

CATCH_UP_QUIET_SECONDS = 0.1
CATCH_UP_MAX_SECONDS = 2.0
REFUSE_MAX_SECONDS = 5.0
_IDLE_POLL_SECONDS = 0.01


class DrainingExecutor(Protocol):
    """What the drain needs of the gRPC thread pool (``grpc_admission``'s executors)."""

    last_taken: float
    refused_while_draining: int

    @property
    def admitted(self) -> int: ...

    def refuse_new_calls(self) -> None: ...


def drain(executor: DrainingExecutor, ports: Sequence[int], paths: Sequence[str], grace: float) -> float:
    """Steps 1 to 4 of the module docstring on the TCP ``ports`` and UNIX ``paths``; the grace left for grpc's
    ``stop``. With no ``grace``, only step 1."""
    shut_sockets(ports, paths, listening=True)
    if not grace:
        return grace
    end = time.monotonic() + grace
    _wait_until_quiet(executor, min(grace, CATCH_UP_MAX_SECONDS))
    executor.refuse_new_calls()
    _wait_until_quiet(executor, min(max(0.0, end - time.monotonic()), REFUSE_MAX_SECONDS))
    _wait_until_idle(executor, end)
    if executor.admitted == 0:   # nothing left to answer: close the connections, not GOAWAY them
        closed = shut_sockets(ports, paths, listening=False)
        logger.info("Draining: %d gRPC call(s) sent after the drain began got UNAVAILABLE; "
                    "%d connection(s) closed", executor.refused_while_draining, closed)
    return max(0.0, end - time.monotonic())


def _wait_until_quiet(executor: DrainingExecutor, limit: float) -> None:
    """Until no call has been taken for ``CATCH_UP_QUIET_SECONDS`` (counted from now at the
    earliest), or ``limit`` seconds have passed."""
    start = time.monotonic()
    end = start + limit
    while True:
        now = time.monotonic()
        quiet_at = max(start, executor.last_taken) + CATCH_UP_QUIET_SECONDS
        if now >= quiet_at or now >= end:
            return
        time.sleep(min(quiet_at, end) - now)


def _wait_until_idle(executor: DrainingExecutor, end: float) -> None:
    """Until no admitted call is left (answered), or ``time.monotonic()`` reaches ``end``."""
    while executor.admitted and time.monotonic() < end:
        time.sleep(_IDLE_POLL_SECONDS)
