"""gRPC front-end: one ``grpc.server`` serving TF Serving's ``PredictionService`` and ``ModelService``.

This module binds and runs the server; each job it composes has a module of its own:

- ``grpc_handlers``: the services' handlers (decode, one ``DataPlane`` call, encode; errors mapped once);
- ``grpc_deserializers``: a message that does not parse is INVALID_ARGUMENT; the heap is trimmed after
  a large one;
- ``grpc_limits``: message sizes, connections, streams, read time, ``--grpc_channel_arguments``;
- ``grpc_admission``: the thread pool that admits a call once its message has arrived, on grpcio's
  private names, read only in ``grpcio_internals`` (which checks the installed grpcio against the pin);
- ``grpc_drain``: ``stop(grace)``'s four steps before grpc's own shutdown (``socket_shutdown``);
- ``grpc_credentials``: plaintext or TLS from an ``SSLConfig``;
- ``grpc_health``: the standard ``grpc.health.v1.Health`` service.

Admission: ``max_concurrent_rpcs`` bounds the calls being handled or waiting
for one of the ``max_threads`` threads (grpc's ``maximum_concurrent_rpcs``);
past it a call is refused at once with RESOURCE_EXHAUSTED ("Concurrent RPC
limit exceeded!") instead of queueing without bound. Without the bound,
open-loop overload piled up thousands of calls in the server and gRPC core
began dropping newly arrived ones before grpc Python had taken them: clients
saw CANCELLED within a millisecond. With it, CPU overload still left calls
waiting in core for grpc Python to take them, and core drops those past its
pending-queue cap with CANCELLED; ``grpc_limits`` raises the cap.

``GrpcFrontend`` loads TensorFlow (``grpc_handlers`` imports
``tensorflow_serving``'s messages); the composition root imports this module
only when it starts the gRPC front-end.
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence, Union

import grpc
from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

from serving import status
from serving.server.frontends import grpcio_internals
from serving.server.frontends.dataplane import DataPlane
from serving.server.frontends.grpc_admission import FallbackExecutor, MessageFirstExecutor
from serving.server.frontends.grpc_credentials import server_credentials
from serving.server.frontends.grpc_deserializers import TrimmingRegistrar
from serving.server.frontends.grpc_drain import drain
from serving.server.frontends.grpc_handlers import ModelService, PredictionService
from serving.server.frontends.grpc_health import HealthService
from serving.server.frontends.grpc_limits import (
    MAX_MESSAGE_LENGTH,
    ChannelArgument,
    GrpcConnectionLimits,
    parse_channel_arguments,
    server_options,
)

# The composition root builds the front-end with these; each is defined in the module of its job.
__all__ = ["GrpcFrontend", "MAX_MESSAGE_LENGTH", "parse_channel_arguments", "server_credentials",
           "listen_address"]

logger = logging.getLogger(__name__)


def listen_address(host: str, port: int) -> str:
    """``host:port`` for ``add_*_port``; an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class GrpcFrontend:
    """A ``grpc.server`` serving both services; ``start()`` / ``stop(grace)``.

    ``addresses`` are listen addresses (``127.0.0.1:8500``, ``unix:/path``),
    all bound with ``credentials`` (``server_credentials``; None: plaintext).
    ``max_concurrent_rpcs`` (None: unbounded) and ``max_tensor_elements``
    (None: unbounded) are the admission bounds of the module docstring.
    ``stop(grace)`` refuses new connections at once, serves the calls already
    sent, refuses later ones with UNAVAILABLE (``grpc_drain``), then lets
    running ones finish for up to ``grace`` seconds. ``enable_health_service``
    adds the standard ``grpc.health.v1.Health`` service (``grpc_health``).
    """

    def __init__(self, dataplane: DataPlane, addresses: Sequence[str], *, max_threads: int,
                 channel_arguments: Sequence[ChannelArgument] = (), use_tensor_content: bool = False,
                 credentials: Optional[grpc.ServerCredentials] = None,
                 max_concurrent_rpcs: Optional[int] = None, max_tensor_elements: Optional[int] = None,
                 limits: Optional[GrpcConnectionLimits] = None, max_receive_message_bytes: Optional[int] = None,
                 enable_health_service: bool = False) -> None:
        self._dataplane = dataplane
        self._enable_health_service = enable_health_service
        self._addresses = list(addresses)
        self._max_threads = max(1, max_threads)
        self._max_concurrent_rpcs = max_concurrent_rpcs
        self._max_tensor_elements = max_tensor_elements
        self._max_receive_message_bytes = max_receive_message_bytes
        self._limits = limits or GrpcConnectionLimits()
        self._options = server_options(self._limits, max_receive_message_bytes, channel_arguments)
        self._use_tensor_content = use_tensor_content
        self._credentials = credentials
        self._server: Optional[grpc.Server] = None
        self._executor: Optional[Union[MessageFirstExecutor, FallbackExecutor]] = None
        self.bound_ports: list[int] = []

    def start(self) -> None:
        """Bind every address and serve; InvalidArgument when an address cannot be bound."""
        executor, server = self._executor_and_server()
        registrar = TrimmingRegistrar(server)
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
            PredictionService(self._dataplane, self._use_tensor_content, self._max_tensor_elements,
                              self._max_receive_message_bytes), registrar)
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(self._dataplane), registrar)
        if self._enable_health_service:   # --enable_grpc_healthcheck_service
            server.add_generic_rpc_handlers((HealthService().handler(),))
        for address in self._addresses:
            port = self._bind(server, address)
            self.bound_ports.append(port)
            logger.info("Running gRPC ModelServer at %s%s ...", address, " (TLS)" if self._credentials else "")
        server.start()
        executor.start_watchdog()
        self._server, self._executor = server, executor

    def _executor_and_server(self) -> tuple[Union[MessageFirstExecutor, FallbackExecutor], grpc.Server]:
        """Admission by the executor (it counts calls whose message has arrived), or, on a grpcio without the
        private names it needs, grpcio's own ``maximum_concurrent_rpcs`` (``grpcio_internals``)."""
        if grpcio_internals.SUPPORTED:
            executor = MessageFirstExecutor(self._max_threads, max_concurrent_rpcs=self._max_concurrent_rpcs,
                                            read_timeout=self._limits.read_timeout_seconds or None)
            return executor, grpc.server(executor, options=self._options)
        logger.warning("grpcio %s lacks %s: gRPC admission falls back to grpcio's own (no read timeout for a "
                       "call whose message never arrives); install grpcio==%s", grpcio_internals.INSTALLED_GRPCIO,
                       ", ".join(grpcio_internals.missing_names()), grpcio_internals.PINNED_GRPCIO)
        fallback = FallbackExecutor(self._max_threads)
        return fallback, grpc.server(fallback, options=self._options, maximum_concurrent_rpcs=self._max_concurrent_rpcs)

    def _bind(self, server: grpc.Server, address: str) -> int:
        cannot = f"Failed to BuildAndStart gRPC server: cannot bind {address}"
        if self._credentials is not None:
            cannot += " with the SSLConfig's credentials (is server_key the key of server_cert?)"
        try:
            port = (server.add_secure_port(address, self._credentials) if self._credentials
                    else server.add_insecure_port(address))
        except RuntimeError as exc:   # grpcio raises when the address cannot be bound
            raise status.InvalidArgument(cannot) from exc
        if port == 0 and not address.startswith("unix:"):
            raise status.InvalidArgument(cannot)
        return port

    def stop(self, grace: Optional[float] = None) -> None:
        """Refuse new connections now, take the calls already sent, wait up to ``grace`` seconds for them."""
        server, executor = self._server, self._executor
        if server is None or executor is None:
            return
        self._server = self._executor = None
        paths = [address[len("unix:"):] for address in self._addresses if address.startswith("unix:")]
        ports = [port for address, port in zip(self._addresses, self.bound_ports) if not address.startswith("unix:")]
        left = drain(executor, ports, paths, grace or 0.0)
        server.stop(left if grace else grace).wait()
        executor.shutdown(wait=False)
