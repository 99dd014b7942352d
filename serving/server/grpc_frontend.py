"""gRPC front-end: TF Serving's ``PredictionService`` and ``ModelService`` on the official stubs.

Each handler decodes the request, makes one ``DataPlane`` call and encodes
the answer. Errors leave through one place (``_rpc``): the canonical code is
copied numerically into the gRPC status and the message truncated as
``model_servers/grpc_status_util.cc`` does. The server accepts messages up
to int32 max both ways (``server.cc`` ``SetMaxMessageSize``) and honours the
client's deadline.

The server is ``grpc.aio`` on an event loop of its own thread. Data-plane
calls run on a pool of ``max_threads`` threads, never on the loop. A Predict
whose model run is queued for batching returns its thread at once and the
handler awaits the queue's future, so a waiting request holds no thread and
batches can grow past the pool's size.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from concurrent import futures
from typing import Any, Callable, Optional, Sequence

import grpc

from serving import codec, status
from serving.server.dataplane import DataPlane, ModelSpec

__all__ = ["GrpcFrontend", "MAX_MESSAGE_LENGTH", "parse_channel_arguments"]

logger = logging.getLogger(__name__)

MAX_MESSAGE_LENGTH = 2**31 - 1


def parse_channel_arguments(text: str) -> list[tuple[str, Any]]:
    """``--grpc_channel_arguments``: comma-separated ``key=value``; ints passed as ints."""
    arguments: list[tuple[str, Any]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, value = item.partition("=")
        try:
            arguments.append((key.strip(), int(value)))
        except ValueError:
            arguments.append((key.strip(), value.strip()))
    return arguments


def _rpc(method: Callable) -> Callable:
    """Map ``ServingError`` (and anything unexpected) to a gRPC status, once."""
    @functools.wraps(method)
    async def handler(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await method(self, request, context)
        except status.ServingError as exc:
            await context.abort(status.to_grpc_status(exc.code), status.truncate_for_grpc(exc.details))
        except Exception as exc:  # noqa: BLE001 - every failure must become a status
            logger.exception("%s failed", method.__name__)
            await context.abort(grpc.StatusCode.INTERNAL,
                                status.truncate_for_grpc(f"{type(exc).__name__}: {exc}"))
    return handler


def _spec(model_spec: Any) -> ModelSpec:
    version = model_spec.version.value if model_spec.HasField("version") else None
    return ModelSpec(model_spec.name, version, model_spec.version_label or None, model_spec.signature_name)


def _deadline(context: grpc.aio.ServicerContext) -> Optional[float]:
    remaining = context.time_remaining()
    return None if remaining is None else time.monotonic() + remaining


async def _within(awaitable: Any, deadline: Optional[float]) -> Any:
    """Await ``awaitable``; past ``deadline`` (ours, or gRPC cancelling the call at it) it is DEADLINE_EXCEEDED."""
    try:
        if deadline is None:
            return await awaitable
        return await asyncio.wait_for(awaitable, max(0.0, deadline - time.monotonic()))
    except (asyncio.TimeoutError, asyncio.CancelledError):
        if deadline is None:
            raise
        raise status.DeadlineExceeded("Deadline Exceeded") from None


def _to_arrays(tensors: Any) -> dict:
    arrays = {}
    for name, proto in tensors.items():
        try:
            arrays[name] = codec.tensor_proto_to_ndarray(proto)
        except ValueError as exc:
            raise status.InvalidArgument(f"Input tensor {name!r} is not a valid TensorProto: {exc}") from exc
    return arrays


class _PredictionService:
    def __init__(self, dataplane: DataPlane, executor: futures.Executor, use_tensor_content: bool) -> None:
        from tensorflow_serving.apis import predict_pb2

        self._dp = dataplane
        self._executor = executor
        self._predict_pb2 = predict_pb2
        self._use_tensor_content = use_tensor_content

    async def _call(self, function: Callable, *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` on the pool, never on the event loop."""
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(function, *args, **kwargs))

    @_rpc
    async def Predict(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        deadline = _deadline(context)
        with self._dp.track(request.model_spec.name, "Predict", "GRPC"):
            submitted = self._call(self._dp.submit_predict, _spec(request.model_spec), _to_arrays(request.inputs),
                                   list(request.output_filter), deadline=deadline)
            result = await _within(self._await_prediction(submitted), deadline)
        response = self._predict_pb2.PredictResponse()
        response.model_spec.name = result.name
        response.model_spec.version.value = result.version
        response.model_spec.signature_name = result.signature_name
        for name, array in result.outputs.items():
            codec.ndarray_to_tensor_proto(array, response.outputs[name],
                                          use_tensor_content=self._use_tensor_content)
        return response

    @staticmethod
    async def _await_prediction(submitted: Any) -> Any:
        future = await submitted
        return future.result() if future.done() else await asyncio.wrap_future(future)

    @_rpc
    async def Classify(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        deadline = _deadline(context)
        with self._dp.track(request.model_spec.name, "Classify", "GRPC"):
            return await _within(self._call(self._dp.classify, _spec(request.model_spec), request.input,
                                            deadline=deadline), deadline)

    @_rpc
    async def Regress(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        deadline = _deadline(context)
        with self._dp.track(request.model_spec.name, "Regress", "GRPC"):
            return await _within(self._call(self._dp.regress, _spec(request.model_spec), request.input,
                                            deadline=deadline), deadline)

    @_rpc
    async def MultiInference(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        deadline = _deadline(context)
        return await _within(self._call(self._dp.multi_inference, request, deadline=deadline), deadline)

    @_rpc
    async def GetModelMetadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        if not request.HasField("model_spec"):
            raise status.InvalidArgument("Missing ModelSpec")
        return await self._call(self._dp.model_metadata, _spec(request.model_spec), list(request.metadata_field))


class _ModelService:
    def __init__(self, dataplane: DataPlane, executor: futures.Executor) -> None:
        self._dp = dataplane
        self._executor = executor

    async def _call(self, function: Callable, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    @_rpc
    async def GetModelStatus(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        if not request.HasField("model_spec"):
            raise status.InvalidArgument("Missing ModelSpec")
        return await self._call(self._dp.model_status, _spec(request.model_spec))

    async def HandleReloadConfigRequest(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """Reload; like TF Serving, the status is both in the response and the RPC status."""
        from tensorflow_serving.apis import model_management_pb2

        response = model_management_pb2.ReloadConfigResponse()
        try:
            await self._call(self._dp.reload_config, request.config)
        except status.ServingError as exc:
            logger.error("ReloadConfig failed: %s", exc.details)
            response.status.error_code = int(exc.code)
            response.status.error_message = exc.details
            context.set_code(status.to_grpc_status(exc.code))
            context.set_details(status.truncate_for_grpc(exc.details))
        return response


class GrpcFrontend:
    """A ``grpc.aio`` server serving both services; ``start()`` / ``stop(grace)``.

    ``addresses`` are listen addresses (``0.0.0.0:8500``, ``unix:/path``).
    ``start()`` runs the server's event loop in a thread of its own and
    returns once every address is bound. ``stop(grace)`` refuses new RPCs at
    once and lets running ones finish for up to ``grace`` seconds.
    """

    def __init__(self, dataplane: DataPlane, addresses: Sequence[str], *, max_threads: int,
                 channel_arguments: Sequence[tuple[str, Any]] = (), use_tensor_content: bool = False) -> None:
        self._dataplane = dataplane
        self._addresses = list(addresses)
        self._max_threads = max(1, max_threads)
        self._options = [("grpc.max_send_message_length", MAX_MESSAGE_LENGTH),
                         ("grpc.max_receive_message_length", MAX_MESSAGE_LENGTH),
                         ("grpc.so_reuseport", 0), *channel_arguments]
        self._use_tensor_content = use_tensor_content
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._executor: Optional[futures.ThreadPoolExecutor] = None
        self._server: Optional[grpc.aio.Server] = None
        self.bound_ports: list[int] = []

    def start(self) -> None:
        loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="grpc-event-loop", daemon=True)
        self._thread.start()
        self._loop = loop
        self._executor = futures.ThreadPoolExecutor(max_workers=self._max_threads, thread_name_prefix="grpc")
        try:
            self._server = asyncio.run_coroutine_threadsafe(self._start(self._executor), loop).result()
        except BaseException:
            self._close_loop()
            raise

    async def _start(self, executor: futures.Executor) -> grpc.aio.Server:
        from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

        server = grpc.aio.server(options=self._options)
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
            _PredictionService(self._dataplane, executor, self._use_tensor_content), server)
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(_ModelService(self._dataplane, executor), server)
        for address in self._addresses:
            try:
                port = server.add_insecure_port(address)
            except RuntimeError as exc:   # grpcio raises when the address cannot be bound
                raise status.InvalidArgument(f"Failed to BuildAndStart gRPC server: cannot bind {address}") from exc
            if port == 0 and not address.startswith("unix:"):
                raise status.InvalidArgument(f"Failed to BuildAndStart gRPC server: cannot bind {address}")
            self.bound_ports.append(port)
            logger.info("Running gRPC ModelServer at %s ...", address)
        await server.start()
        return server

    def stop(self, grace: Optional[float] = None) -> None:
        """Stop accepting RPCs now; wait up to ``grace`` seconds for running ones."""
        if self._server is not None and self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._server.stop(grace), self._loop).result()
            self._server = None
        self._close_loop()

    def _close_loop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()
            self._loop = self._thread = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
