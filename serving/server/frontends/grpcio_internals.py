"""The one module that touches grpcio's private names (``grpc._server``, ``grpc._cython``).

The gRPC front-end's admission (``grpc_admission.MessageFirstExecutor``)
reads a unary call's request message before the call takes a thread. grpcio
offers no public hook for that, so it drives grpcio's sync server through
its private helpers: the job grpcio submits to the thread pool
(``_unary_response_in_pool``), the receive callback (``_receive_message``),
the abort (``_abort``), the RPC state and its condition, and core's
``ReceiveMessageOperation``. Every such name is read here and nowhere else.

Those names are not an API: grpcio may change them in any release. The
server's extra pins the version they were read from (``server-core``:
``grpcio==PINNED_GRPCIO``), and at import this module compares the installed
grpcio with the pin (:func:`version_mismatch`):

- the pinned version: ``SUPPORTED`` is true and the admission above is used;
- another version: a ``RuntimeWarning`` names both versions, the pin and what
  to do (install the pin: ``pip install -c constraints.txt .[server]``), and
  ``SUPPORTED`` is true only if every private name the admission uses is
  still there. When one is missing, the front-end falls back to grpcio's own
  admission (``maximum_concurrent_rpcs``; no read timeout for a call whose
  message never arrives: see ``grpc_admission``), and says so in the log.

``tests/security/test_grpc_stalled_streams.py`` fails if a release keeps the
names but changes what they do.
"""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Callable, Optional

import grpc

__all__ = ["PINNED_GRPCIO", "INSTALLED_GRPCIO", "SUPPORTED", "version_mismatch", "missing_names",
           "is_unary_request_job", "receive_message", "start_receive", "abort", "is_active", "client_closed",
           "Call", "RpcEvent", "RpcState", "StatusCode", "UNAVAILABLE", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED",
           "UNIMPLEMENTED"]

PINNED_GRPCIO = "1.85.3"   # pyproject.toml's server-core extra and constraints.txt pin this version
INSTALLED_GRPCIO: str = grpc.__version__

# What the admission uses of grpc._server (functions and constants), and of grpc._cython.cygrpc.
_SERVER_NAMES = ("_unary_response_in_pool", "_receive_message", "_abort", "_is_rpc_state_active", "_CLOSED",
                 "_EMPTY_FLAGS", "_RECEIVE_MESSAGE_TOKEN", "_RPCState")
_CYGRPC_NAMES = ("Call", "BaseEvent", "StatusCode", "ReceiveMessageOperation")


def version_mismatch(installed: str, pinned: str = PINNED_GRPCIO) -> Optional[str]:
    """None when ``installed`` is the pinned grpcio; else what an operator reads: both versions, the pin, the fix
    and the fallback."""
    if installed == pinned:
        return None
    return (f"grpcio {installed} is installed, but the embedded server's gRPC admission uses private names of "
            f"grpcio {pinned} (grpc._server, grpc._cython), pinned in the server-core extra (grpcio=={pinned}). "
            f"Install the pin: pip install -c constraints.txt '.[server]' (or pip install grpcio=={pinned}). "
            "If those names are missing in this version, the gRPC front-end falls back to grpcio's own admission "
            "(--grpc_max_concurrent_rpcs still bounds calls, but a call whose request message never arrives "
            "holds a worker thread: --grpc_read_timeout_seconds no longer ends it)")


def _private_modules() -> tuple[Any, Any]:
    try:
        from grpc import _server as server_module
        from grpc._cython import cygrpc as cygrpc_module
    except ImportError:
        return None, None
    return server_module, cygrpc_module


_server, _cygrpc = _private_modules()


def missing_names(server_module: Any = _server, cygrpc_module: Any = _cygrpc) -> list[str]:
    """The private names the admission uses that this grpcio lacks ([] when it has them all)."""
    if server_module is None or cygrpc_module is None:
        return ["grpc._server", "grpc._cython.cygrpc"]
    return ([f"grpc._server.{name}" for name in _SERVER_NAMES if not hasattr(server_module, name)]
            + [f"grpc._cython.cygrpc.{name}" for name in _CYGRPC_NAMES if not hasattr(cygrpc_module, name)])


_mismatch = version_mismatch(INSTALLED_GRPCIO)
if _mismatch is not None:   # the one import-time action: tell whoever installed another grpcio
    warnings.warn(_mismatch, RuntimeWarning, stacklevel=2)
SUPPORTED: bool = not missing_names()
"""Whether ``MessageFirstExecutor`` can run on the installed grpcio (else grpcio's own admission is used)."""

if TYPE_CHECKING:
    from typing import TypeAlias

    from grpc import _server as _typed_server

    Call: TypeAlias = Any   # grpc._cython.cygrpc.Call: a compiled module, without types
    RpcEvent: TypeAlias = Any   # grpc._cython.cygrpc.BaseEvent
    StatusCode: TypeAlias = Any   # grpc._cython.cygrpc.StatusCode
    RpcState: TypeAlias = _typed_server._RPCState
else:
    Call = getattr(_cygrpc, "Call", object)
    RpcEvent = getattr(_cygrpc, "BaseEvent", object)
    RpcState = getattr(_server, "_RPCState", object)
    StatusCode = getattr(_cygrpc, "StatusCode", None)

UNAVAILABLE = StatusCode.unavailable if SUPPORTED else None
RESOURCE_EXHAUSTED = StatusCode.resource_exhausted if SUPPORTED else None
DEADLINE_EXCEEDED = StatusCode.deadline_exceeded if SUPPORTED else None
UNIMPLEMENTED = StatusCode.unimplemented if SUPPORTED else None


def is_unary_request_job(args: tuple, kwargs: dict) -> bool:
    """Whether what grpcio submits to its thread pool is a unary-request call's job (``_unary_response_in_pool``):
    ``(in_pool, rpc_event, state, behavior, argument_thunk, deserializer, serializer)``."""
    return bool(args) and args[0] is _server._unary_response_in_pool and not kwargs


def receive_message(state: RpcState, call: Call, deserializer: Optional[Callable[[bytes], object]]
                    ) -> Callable[[RpcEvent], object]:
    """grpcio's receive callback: sets ``state.request`` from the event, or ``state.client`` when the call ends."""
    return _server._receive_message(state, call, deserializer)


def start_receive(call: Call, state: RpcState, on_message: Callable[[RpcEvent], object]) -> None:
    """Ask core for the call's request message; ``on_message`` runs on grpcio's polling thread when it is there.
    Hold ``state.condition`` (grpcio does, when it submits the job)."""
    call.start_server_batch((_cygrpc.ReceiveMessageOperation(_server._EMPTY_FLAGS),), on_message)
    state.due.add(_server._RECEIVE_MESSAGE_TOKEN)


def abort(state: RpcState, call: Call, code: StatusCode, details: bytes) -> None:
    """End the call with ``code`` and ``details`` (hold ``state.condition``)."""
    _server._abort(state, call, code, details)


def is_active(state: RpcState) -> bool:
    """Whether the call may still be answered (not ended, not cancelled)."""
    return _server._is_rpc_state_active(state)


def client_closed(state: RpcState) -> bool:
    """Whether the client half-closed the call without sending a request message."""
    return state.client is _server._CLOSED
