"""Composition root of the embedded server: ``tensorflow_model_server``'s ``Server::BuildAndStart``.

``ModelServer(flags)`` builds, in TF Serving's order, the metrics, the batch
scheduler (``--enable_batching``), the servable manager with its initial
config (waiting for the first loads, as ``ServerCore::Create`` does), the
optional config-file poller, then the gRPC and REST front-ends over one
``DataPlane``. ``stop(grace)`` drains: both front-ends stop accepting at once
and finish running requests, then models unload and the scheduler stops.
Before the first load, the crash markers of ``--quarantine_dir`` are read
(``core.quarantine``): a version that killed the last process is never loaded.
``--model_config_file`` is read with ``serving.server.config_file``'s bounds.
From ``start()`` to ``stop()`` Python's heap is frozen after each model load
(``HeapFreezer``, ``serving.server.heap_freezer``), which keeps the garbage
collector's walks over TensorFlow's objects out of the request path.

Both front-ends listen on ``--bind_address`` (default 127.0.0.1; TF Serving
binds 0.0.0.0). With ``--ssl_config_file`` the gRPC listeners use TLS or
mutual TLS (``BuildServerCredentialsFromSSLConfigFile``); the file is read
before any model loads, so a bad one fails at once. REST stays plain HTTP, as
TF Serving's does.

Importing this module loads neither TensorFlow nor gRPC: the gRPC front-end
(which needs ``tensorflow_serving``'s messages) is imported when the server starts.
"""
from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Optional

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from tensorflow_serving.config.model_server_config_pb2 import ModelServerConfig

from serving import config as config_files
from serving import status
from serving.config.protos import batching_parameters_class
from serving.server.batching import BatchingOptions, BatchingRunWrapper, BatchScheduler
from serving.server.heap_freezer import HeapFreezer
from serving.server.config_file import read_config_text
from serving.server.core.manager import ServableManager
from serving.server.core.quarantine import QuarantiningLoaderFactory, VersionQuarantine
from serving.server.admission import MemoryAdmission
from serving.server.flags import (
    ServerFlags,
    effective_grpc_max_concurrent_rpcs,
    effective_grpc_max_concurrent_streams,
    effective_max_tensor_elements,
    effective_memory_budgets,
    effective_grpc_max_receive_message_bytes,
    effective_quarantine_dir,
)
from serving.server.frontends.dataplane import DataPlane
from serving.server.frontends.rest import RestFrontend
from serving.server.frontends.rest_limits import RestLimits
from serving.server.metrics import CaptureMetrics, ServerMetrics
from serving.server.request_capture import ServerRequestCapture, capture_settings
from serving.server.tensorflow.loader import LoaderOptions, SavedModelLoader
from serving.server.tensorflow.servable import Servable

if TYPE_CHECKING:  # loads TensorFlow; imported for real in _start_grpc
    import grpc

    from serving.server.frontends.grpc import GrpcFrontend

__all__ = ["ModelServer", "DEFAULT_PROMETHEUS_PATH", "single_model_config"]

logger = logging.getLogger(__name__)

DEFAULT_PROMETHEUS_PATH = "/monitoring/prometheus/metrics"
_MAX_INT32 = 2**31 - 1
DEFAULT_BATCH_THREAD_POOL = "model_server_batch_threads"


def _read_model_server_config(path: str) -> ModelServerConfig:
    """``--model_config_file``, read with ``serving.server.config_file``'s bounds (a regular file, 16 MiB; an
    ``OSError`` otherwise) and parsed as ``ParseProtoTextFile<ModelServerConfig>`` parses it: a text proto that
    does not parse is logged as protobuf's TextFormat logs it and is ``Invalid protobuf file: '<path>'``
    (``util/proto_util.h``)."""
    text = read_config_text(path)
    try:
        return config_files.parse_text_proto(text, ModelServerConfig())
    except ValueError as exc:
        logger.error("Error parsing text-format tensorflow.serving.ModelServerConfig: %s", exc.__cause__ or exc)
        raise status.InvalidArgument(f"Invalid protobuf file: '{path}'") from exc


def single_model_config(name: str, base_path: str) -> ModelServerConfig:
    """``BuildSingleModelConfig``: one model from ``--model_name`` / ``--model_base_path``."""
    config = ModelServerConfig()
    model = config.model_config_list.config.add()
    model.name, model.base_path, model.model_platform = name, base_path, "tensorflow"
    return config


class ModelServer:
    """The running server; ``start()`` then ``stop()``. Not restartable.

    Attributes after ``start()``: ``metrics`` (``ServerMetrics``), ``dataplane``,
    ``grpc`` / ``rest`` front-ends (None when disabled), ``capture`` (request
    capture, None without ``--request_capture_dir``).
    """

    def __init__(self, flags: ServerFlags) -> None:
        self.flags = flags
        self.metrics: Optional[ServerMetrics] = None
        self.dataplane: Optional[DataPlane] = None
        self.grpc: Optional[GrpcFrontend] = None
        self.rest: Optional[RestFrontend] = None
        self._manager: Optional[ServableManager] = None
        self._heap = HeapFreezer()
        self._scheduler: Optional[BatchScheduler] = None
        self._poll_stop = threading.Event()
        self._poller: Optional[threading.Thread] = None
        self.quarantine: Optional[VersionQuarantine] = None
        self.capture: Optional[ServerRequestCapture] = None

    def start(self) -> None:
        """Load the initial models, then open the front-ends. Raises ``ServingError`` on bad config."""
        flags = self.flags
        model_config = self._model_config()
        monitoring_path = self._monitoring_path()
        grpc_credentials, grpc_security = self._grpc_credentials()
        self.metrics = ServerMetrics(CollectorRegistry())
        self.quarantine = self._open_quarantine()
        self.capture = self._start_capture()
        self._heap.start()
        self._manager = self._build_manager()
        self._manager.start()
        self._manager.reload_config(model_config)
        self.dataplane = DataPlane(self._manager, self.metrics, self._memory_admission(), self.capture)
        self._start_config_poller()
        self._start_grpc(grpc_credentials)
        if grpc_credentials is not None:
            logger.info("gRPC uses %s; HTTP/REST has no TLS, as in TF Serving (a TLS gateway belongs in front)",
                        grpc_security)
        if flags.rest_api_port != 0:
            if flags.rest_api_port == flags.port:
                logger.error("server_options.http_port cannot be same as grpc_port. Please use a different "
                             "port for HTTP/REST API. Skipped exporting HTTP/REST API.")
            else:
                self._start_rest(monitoring_path)

    def stop(self, grace: float = 30.0) -> None:
        """Drain: stop accepting on both front-ends, finish running requests, then unload."""
        self._poll_stop.set()
        stoppers = [threading.Thread(target=frontend.stop, args=(grace,), name=f"stop-{name}")
                    for name, frontend in (("grpc", self.grpc), ("rest", self.rest)) if frontend is not None]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join()
        self.grpc = self.rest = None
        if self._poller is not None:
            self._poller.join(5)
        if self._manager is not None:
            self._manager.stop(drain_timeout=grace)
        if self._scheduler is not None:
            self._scheduler.stop()
        if self.capture is not None:
            self.capture.stop()
        self._heap.stop()

    # -- construction --------------------------------------------------
    def _model_config(self) -> ModelServerConfig:
        if not self.flags.model_config_file:
            return single_model_config(self.flags.model_name, self.flags.model_base_path)
        try:
            return _read_model_server_config(self.flags.model_config_file)
        except (OSError, ValueError) as exc:
            raise status.InvalidArgument(str(exc)) from exc

    def _monitoring_path(self) -> Optional[str]:
        if not self.flags.monitoring_config_file:
            return None
        try:
            monitoring = config_files.load_monitoring_config(self.flags.monitoring_config_file)
        except (OSError, ValueError) as exc:
            raise status.InvalidArgument(str(exc)) from exc
        if not monitoring.prometheus_config.enable:
            return None
        return monitoring.prometheus_config.path or DEFAULT_PROMETHEUS_PATH

    def _grpc_credentials(self) -> tuple[Optional[grpc.ServerCredentials], str]:
        """``BuildServerCredentialsFromSSLConfigFile`` and what they are; None (plaintext) without
        ``--ssl_config_file``."""
        if not self.flags.ssl_config_file:
            return None, "plaintext"
        # tensorflow_serving's messages load TensorFlow: the gRPC front-end is imported once the server starts.
        from serving.server.frontends.grpc import server_credentials

        try:
            ssl_config = config_files.load_ssl_config(self.flags.ssl_config_file)
        except (OSError, ValueError) as exc:
            raise status.InvalidArgument(f"--ssl_config_file: {exc}") from exc
        security = ("mutual TLS (client certificates signed by custom_ca required)" if ssl_config.client_verify
                    else "TLS")
        return server_credentials(ssl_config), security

    def _open_quarantine(self) -> Optional[VersionQuarantine]:
        """The crash markers (``core.quarantine``); None, with an error logged, if the directory is unusable."""
        directory = effective_quarantine_dir(self.flags)
        if directory is None:
            logger.warning("--quarantine_dir=none: a version that crashes the server is loaded again at restart")
            return None
        quarantine = VersionQuarantine(directory)
        try:
            quarantine.open()
        except OSError as exc:
            logger.error("Cannot use --quarantine_dir %s (%s): versions that crash the server are not "
                         "quarantined", directory, exc)
            return None
        logger.info("Crash markers in %s (--quarantine_dir); %d version(s) quarantined", directory,
                    len(quarantine.quarantined()))
        assert self.metrics is not None   # built before the quarantine
        self.metrics.registry.register(_QuarantineCollector(quarantine))
        return quarantine

    def _start_capture(self) -> Optional[ServerRequestCapture]:
        """Request capture (``--request_capture_dir``); a directory that cannot be made or written fails the start."""
        settings = capture_settings(self.flags)
        if settings is None:
            return None
        capture = ServerRequestCapture(settings)
        try:
            capture.start()
        except OSError as exc:
            raise status.InvalidArgument(f"--request_capture_dir={settings.directory} cannot be used: "
                                         f"{exc.strerror or exc}") from exc
        assert self.metrics is not None   # built before capture
        CaptureMetrics(capture.counts, self.metrics.registry)
        return capture

    def _memory_admission(self) -> MemoryAdmission:
        per_request, in_flight, _ = effective_memory_budgets(self.flags)
        logger.info("Memory admission: a request may take an estimated %s bytes, requests in flight %s bytes "
                    "together (--max_request_memory_bytes, --max_in_flight_memory_bytes)", per_request, in_flight)
        return MemoryAdmission(per_request, in_flight)

    def _build_manager(self) -> ServableManager[Servable]:
        flags = self.flags
        intra, inter = flags.tensorflow_intra_op_parallelism, flags.tensorflow_inter_op_parallelism
        if intra <= 0 and inter <= 0:
            intra = inter = flags.tensorflow_session_parallelism
        options = LoaderOptions(
            enable_model_warmup=flags.enable_model_warmup,
            num_request_iterations_for_warmup=max(1, flags.num_request_iterations_for_warmup),
            intra_op=intra, inter_op=inter,
            saved_model_tags=tuple(t for t in flags.saved_model_tags.split(",") if t) or ("serve",),
            run_wrapper=self._batching_wrapper())
        loader = SavedModelLoader(options, self.metrics)   # core/ knows no TensorFlow: its loader is injected
        return ServableManager(
            loader if self.quarantine is None else QuarantiningLoaderFactory(loader, self.quarantine),
            max_num_load_retries=max(0, flags.max_num_load_retries),
            load_retry_interval_micros=max(0, flags.load_retry_interval_micros),  # negative: no wait
            file_system_poll_wait_seconds=float(flags.file_system_poll_wait_seconds),
            allow_version_labels=True,
            allow_version_labels_for_unavailable_models=flags.allow_version_labels_for_unavailable_models,
            heap=self._heap,
            quarantined=None if self.quarantine is None else self.quarantine.is_quarantined)

    def _batching_wrapper(self) -> Optional[BatchingRunWrapper]:
        if not self.flags.enable_batching:
            return None
        if self.flags.batching_parameters_file:
            try:
                parameters = config_files.load_batching_parameters(self.flags.batching_parameters_file)
            except (OSError, ValueError) as exc:
                raise status.InvalidArgument(str(exc)) from exc
        else:
            parameters = batching_parameters_class()()
            parameters.thread_pool_name.value = DEFAULT_BATCH_THREAD_POOL
        self._scheduler = BatchScheduler(BatchingOptions.from_proto(parameters), metrics=self.metrics)
        self._scheduler.start()
        return BatchingRunWrapper(self._scheduler)

    def _start_config_poller(self) -> None:
        seconds = self.flags.model_config_file_poll_wait_seconds
        if seconds <= 0 or not self.flags.model_config_file:
            return
        self._poller = threading.Thread(target=self._poll_config, args=(seconds,),
                                        name="fs-model-config-poll", daemon=True)
        self._poller.start()

    def _poll_config(self, seconds: float) -> None:
        """``PollFilesystemAndReloadConfig``: errors are logged, the old config stays.

        Each reload waits for its new models one poll interval at most (TF Serving waits without
        end, so a model that never gets a version stops it applying later versions of the file).
        """
        while not self._poll_stop.wait(seconds):
            try:
                config = _read_model_server_config(self.flags.model_config_file)
            except (OSError, ValueError) as exc:
                logger.error("Failed to read ModelServerConfig file: %s", exc)
                continue
            except status.InvalidArgument as exc:
                logger.error("Failed to read ModelServerConfig file: %s", exc.details)
                continue
            try:
                assert self._manager is not None   # the poller starts after the manager
                self._manager.reload_config(config, timeout=seconds, caller_gone=self._poll_stop)
            except status.ServingError as exc:
                logger.error("PollFilesystemAndReloadConfig failed to ReloadConfig: %s", exc.details)

    def _start_grpc(self, credentials: Optional[grpc.ServerCredentials]) -> None:
        # tensorflow_serving's messages load TensorFlow: imported only when the gRPC front-end starts.
        from serving.server.frontends.grpc import GrpcFrontend, listen_address, parse_channel_arguments
        from serving.server.frontends.grpc_limits import GrpcConnectionLimits

        assert self.dataplane is not None   # built before the front-ends start
        flags = self.flags
        addresses = [listen_address(flags.bind_address, flags.port)] if flags.port else []
        if flags.grpc_socket_path:
            addresses.append(f"unix:{flags.grpc_socket_path}")
        max_concurrent_rpcs = effective_grpc_max_concurrent_rpcs(flags)
        logger.info("gRPC admits %d concurrent calls on %d threads; a request's tensors may hold %d elements; "
                    "a message may take %d bytes, also once inflated (--grpc_max_receive_message_bytes)",
                    max_concurrent_rpcs, flags.grpc_max_threads, effective_max_tensor_elements(flags),
                    effective_grpc_max_receive_message_bytes(flags))
        self.grpc = GrpcFrontend(
            self.dataplane, addresses, max_threads=flags.grpc_max_threads,
            channel_arguments=parse_channel_arguments(flags.grpc_channel_arguments),
            use_tensor_content=flags.enable_serialization_as_tensor_content, credentials=credentials,
            max_concurrent_rpcs=max_concurrent_rpcs, max_tensor_elements=effective_max_tensor_elements(flags),
            limits=GrpcConnectionLimits(max_connections=flags.grpc_max_connections,
                                        max_concurrent_streams=effective_grpc_max_concurrent_streams(flags),
                                        read_timeout_seconds=flags.grpc_read_timeout_seconds),
            max_receive_message_bytes=min(effective_grpc_max_receive_message_bytes(flags),
                                          effective_memory_budgets(flags)[0] or _MAX_INT32),
            enable_health_service=flags.enable_grpc_healthcheck_service)
        self.grpc.start()

    def _start_rest(self, monitoring_path: Optional[str]) -> None:
        assert self.dataplane is not None   # built before the front-ends start
        flags = self.flags
        limits = RestLimits(
            max_body_bytes=flags.rest_api_max_body_bytes, read_timeout_seconds=flags.rest_api_read_timeout_seconds,
            max_connections=flags.rest_api_max_connections,
            max_concurrent_requests=flags.rest_api_max_concurrent_requests,
            max_body_bytes_in_flight=effective_memory_budgets(flags)[2])
        self.rest = RestFrontend(
            self.dataplane, port=flags.rest_api_port, host=flags.bind_address,
            num_threads=flags.rest_api_num_threads,
            timeout_ms=flags.rest_api_timeout_in_ms, limits=limits,
            monitoring_path=monitoring_path, metrics=self.metrics,
            enable_cors=flags.rest_api_enable_cors_support,
            max_tensor_elements=effective_max_tensor_elements(flags))
        rest, self.rest = self.rest, None   # kept only once listening: a failed start has nothing to stop
        try:
            rest.start()
        except OSError as exc:   # TF Serving logs "Failed to start HTTP Server" and serves gRPC alone
            raise status.InvalidArgument(
                f"Failed to start HTTP Server at {flags.bind_address}:{flags.rest_api_port}: "
                f"{exc.strerror or exc} (errno {exc.errno})") from exc
        self.rest = rest


class _QuarantineCollector(Collector):
    """``quarantined_versions{model_name,model_version}`` 1 per quarantined version (an embedded-only gauge)."""

    def __init__(self, quarantine: VersionQuarantine) -> None:
        self._quarantine = quarantine

    def collect(self) -> list[GaugeMetricFamily]:
        family = GaugeMetricFamily("quarantined_versions",
                                   "Versions never loaded because a server process died loading them",
                                   labels=["model_name", "model_version"])
        for record in self._quarantine.quarantined():
            family.add_metric([record.name, str(record.version)], 1)
        return [family]
