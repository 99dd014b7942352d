"""A loaded SavedModel version: its signatures and a thread-safe ``run``.

This is the embedded server's counterpart of TF Serving's ``SavedModelBundle``
(``servables/tensorflow``): a TF1 ``Session`` holding the imported MetaGraph,
plus the MetaGraph's ``signature_def`` map, decoded into ``serving.codec``'s
``Signature``/``TensorSpec`` (re-exported here). ``run`` feeds signature inputs by
alias and fetches outputs by alias through Session callables (``MakeCallable``),
cached per (signature, input aliases, output aliases): one C++
``Session::RunCallable`` per request, with the GIL released while TensorFlow runs.

Lifecycle: a ``Servable`` is built by ``loader.SavedModelLoader`` and owned by
the manager. Requests reach it only through ``ServableManager.acquire``; the
manager calls ``close()`` once the last holder has released it. ``close()``
first runs the close callbacks (e.g. a batching queue draining), then closes
the Session.

Thread-safety: ``run`` may be called from any number of threads at once.
``wrap_run``, ``add_close_callback`` and ``close`` are called by the loader
and the manager, never concurrently with each other.
"""
from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Callable, ContextManager, Mapping, Optional, Sequence

import numpy as np

from serving import status
from serving.codec import Signature, TensorSpec
from serving.server.admission import MemoryProfile

if TYPE_CHECKING:  # annotations only: importing this module loads no TensorFlow
    import tensorflow as tf
    from tensorflow.core.protobuf import meta_graph_pb2

__all__ = ["TensorSpec", "Signature", "Servable", "RunFn", "RunWrapper", "tf_error_message"]

log = logging.getLogger(__name__)

RunFn = Callable[[str, Mapping[str, np.ndarray], Sequence[str]], "dict[str, np.ndarray]"]
"""``run(signature_name, inputs_by_alias, output_aliases) -> outputs_by_alias``."""

RunWrapper = Callable[["Servable", RunFn], RunFn]
"""Wraps a servable's run right after loading (TF Serving wraps the Session with batching)."""


class Servable:
    """One loaded version of one model. See the module docstring for the contract."""

    def __init__(self, name: str, version: int, path: str, session: "tf.compat.v1.Session",
                 signature_defs: Mapping[str, "meta_graph_pb2.SignatureDef"]) -> None:
        self.name = name
        self.version = int(version)
        self.path = path
        self.signature_defs = dict(signature_defs)
        self.signatures: Mapping[str, Signature] = {
            key: Signature.from_signature_def(key, proto) for key, proto in self.signature_defs.items()}
        self._session = session
        self._callables: dict[tuple, Callable] = {}
        self._callables_lock = threading.Lock()
        self._close_callbacks: list[Callable[[], None]] = []
        self._run: RunFn = self.run_direct
        self._first_run_guard: Optional[Callable[[], ContextManager[None]]] = None
        self._first_run_lock = threading.Lock()
        self._closed = False
        self.memory_profile: Optional[MemoryProfile] = None  # set by warmup (serving.server.admission)

    def __repr__(self) -> str:
        return f"Servable({self.name!r}, version={self.version})"

    def run(self, signature_name: str, inputs: Mapping[str, np.ndarray],
            output_keys: Sequence[str]) -> dict[str, np.ndarray]:
        """Run a signature; inputs and outputs by alias. Goes through the run wrapper, if any.

        Thread-safe. A TensorFlow error keeps its canonical code (as TF
        Serving returns it: InvalidArgumentError is ``status.InvalidArgument``,
        FailedPreconditionError ``status.FailedPrecondition``, ...); any
        other failure is ``status.Internal``.
        """
        if self._first_run_guard is not None:
            with self._first_run_lock:
                guard, self._first_run_guard = self._first_run_guard, None
            if guard is not None:
                with guard():
                    return self._run(signature_name, inputs, output_keys)
        return self._run(signature_name, inputs, output_keys)

    def guard_first_run(self, guard: Callable[[], ContextManager[None]]) -> None:
        """Run the next ``run`` call (the first request after warmup) inside ``guard()`` (a crash marker)."""
        self._first_run_guard = guard

    def run_direct(self, signature_name: str, inputs: Mapping[str, np.ndarray],
                   output_keys: Sequence[str]) -> dict[str, np.ndarray]:
        """``run`` without the wrapper: one Session call. Thread-safe."""
        if self._closed:
            raise status.Unavailable(f"Servable {self.name} version {self.version} has been unloaded")
        signature = self.signatures.get(signature_name)
        if signature is None:
            raise status.FailedPrecondition(f'Serving signature key "{signature_name}" not found.')
        input_keys = tuple(sorted(inputs))
        output_keys = tuple(output_keys)
        fn = self._callable(signature, input_keys, output_keys)
        try:
            values = fn(*(inputs[k] for k in input_keys))
        except Exception as exc:  # TF errors and client-side feed checks
            raise _to_serving_error(exc) from exc
        return dict(zip(output_keys, values))

    def _callable(self, signature: Signature, input_keys: tuple, output_keys: tuple) -> Callable:
        key = (signature.name, input_keys, output_keys)
        fn = self._callables.get(key)
        if fn is not None:
            return fn
        feeds = [_lookup(signature.inputs, k, "input", signature.name).tensor_name for k in input_keys]
        fetches = [_lookup(signature.outputs, k, "output", signature.name).tensor_name
                   for k in output_keys]
        with self._callables_lock:
            fn = self._callables.get(key)
            if fn is None:
                fn = _make_session_callable(self._session, feeds, fetches)
                self._callables[key] = fn
        return fn

    def wrap_run(self, run_wrapper: RunWrapper) -> None:
        """Route ``run`` through ``run_wrapper(self, self.run_direct)`` (the loader calls this)."""
        self._run = run_wrapper(self, self.run_direct)

    def add_close_callback(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` when the servable is closed, before its Session closes."""
        self._close_callbacks.append(fn)

    def close(self) -> None:
        """Run the close callbacks, then release the Session. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for fn in reversed(self._close_callbacks):
            try:
                fn()
            except Exception:
                log.exception("close callback of %r failed", self)
        self._callables.clear()
        self._session.close()


def _make_session_callable(session: "tf.compat.v1.Session", feeds: list[str], fetches: list[str]) -> Callable:
    """A C++ ``Session::MakeCallable`` handle: one ``RunCallable`` per call, GIL released.

    ``Session.make_callable`` with a feed list falls back to the full
    ``Session.run`` machinery in TF 2.x; ``_make_callable_from_options``
    (TF's own Keras TF1 backend uses it) gives the real callable.
    """
    from tensorflow.core.protobuf import config_pb2  # TensorFlow: only once a model is loaded

    options = config_pb2.CallableOptions(feed=feeds, fetch=fetches)
    make = getattr(session, "_make_callable_from_options", None)
    if make is None:  # a TF without the private API: correct, only slower
        return session.make_callable(fetches, feed_list=feeds)
    return make(options)


def _lookup(specs: Mapping[str, TensorSpec], alias: str, kind: str, signature: str) -> TensorSpec:
    try:
        return specs[alias]
    except KeyError:
        raise status.InvalidArgument(
            f"{kind} tensor alias not found in signature: {alias}. Signature {signature} "
            f"has {kind}s {{{','.join(specs)}}}.") from None


def _to_serving_error(exc: Exception) -> status.ServingError:
    """The canonical error TF Serving would return: TensorFlow's own code and message."""
    import tensorflow as tf  # TensorFlow: only once a model is loaded

    if isinstance(exc, status.ServingError):
        return exc
    if isinstance(exc, tf.errors.OpError):
        return status.error_for(exc.error_code, tf_error_message(exc))
    if isinstance(exc, (ValueError, TypeError)):  # numpy conversion of the feeds
        return status.InvalidArgument(str(exc))
    return status.internal_error("Internal error while running the model", exc, log)


_PYTHON_PREFIX = "Graph execution error:"


def tf_error_message(exc: "tf.errors.OpError") -> str:
    """A TF error's message as the C++ runtime reports it (without Python's prefix)."""
    message = exc.message
    if message.startswith(_PYTHON_PREFIX):
        message = message[len(_PYTHON_PREFIX):].lstrip("\n")
    return message
