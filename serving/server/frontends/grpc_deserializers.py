"""The gRPC front-end's request deserializers: a message that does not parse, and the heap after a large one.

grpc core inflates a ``grpc-encoding: gzip`` message into many small heap
blocks, which glibc keeps after a large message is parsed (or fails to
parse). Every method's deserializer here gives the free heap back to the OS
(``malloc_trim``) after a message of ``admission.DEFAULT_RELEASE_AFTER_BYTES``
or more. A message that does not parse is answered INVALID_ARGUMENT, a
client error, instead of grpc's own INTERNAL "Exception deserializing
request!": the deserializer returns an ``_Unparsable`` marker and the
method, seeing it, refuses the call instead of running.

Only grpc's public API is used (``GenericRpcHandler``,
``unary_unary_rpc_method_handler``).
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import grpc
from google.protobuf import message

from serving.server.admission import DEFAULT_RELEASE_AFTER_BYTES
from serving.server.memory import release_free_memory

__all__ = ["TrimmingRegistrar", "TrimmingHandler"]


class _Unparsable:
    """A request message that did not parse; its method answers INVALID_ARGUMENT instead of running."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size


def _trimming(deserialize: Callable[[bytes], message.Message]
              ) -> Callable[[bytes], Union[message.Message, _Unparsable]]:
    """``deserialize`` (``_Unparsable`` when it fails), then the free heap given back after a large message."""
    def deserialize_and_trim(raw: bytes) -> Union[message.Message, _Unparsable]:
        try:
            return deserialize(raw)
        except message.DecodeError:
            return _Unparsable(len(raw))
        finally:
            if len(raw) >= DEFAULT_RELEASE_AFTER_BYTES:
                release_free_memory()
    return deserialize_and_trim


def _refusing_unparsable(behavior: Callable[[message.Message, grpc.ServicerContext], message.Message], method: str
                         ) -> Callable[[Union[message.Message, _Unparsable], grpc.ServicerContext], message.Message]:
    def run(request: Union[message.Message, _Unparsable], context: grpc.ServicerContext) -> message.Message:
        if isinstance(request, _Unparsable):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"The request message of {request.size} bytes could not be parsed as {method}'s request")
        return behavior(request, context)
    return run


class TrimmingHandler(grpc.GenericRpcHandler):
    """A generated service's handler whose methods' request deserializers trim after large messages, and
    whose methods answer a message that does not parse with INVALID_ARGUMENT (grpc's own answer: INTERNAL)."""

    def __init__(self, inner: grpc.GenericRpcHandler) -> None:
        self._inner = inner
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Optional[grpc.RpcMethodHandler]:
        handler = self._wrapped.get(handler_call_details.method)
        if handler is None:   # wrapped once per method this service has; unknown names are never kept
            handler = self._inner.service(handler_call_details)
            if handler is None or handler.request_deserializer is None or handler.unary_unary is None:
                return handler
            handler = grpc.unary_unary_rpc_method_handler(
                _refusing_unparsable(handler.unary_unary, handler_call_details.method.rsplit("/", 1)[-1]),
                request_deserializer=_trimming(handler.request_deserializer),
                response_serializer=handler.response_serializer)
            self._wrapped[handler_call_details.method] = handler
        return handler


class TrimmingRegistrar:
    """What a generated ``add_*Servicer_to_server`` needs of a server; wraps its handlers in ``TrimmingHandler``."""

    def __init__(self, server: grpc.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(tuple(TrimmingHandler(h) for h in handlers))
