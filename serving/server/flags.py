"""``tensorflow_model_server``'s command line, for ``python -m serving.server``.

Every flag of TF Serving 2.17.1 (``model_servers/main.cc``) is accepted with
the same name, default (``model_servers/server.h``) and meaning, plus the two
flags newer releases added. Flags that cannot mean anything on this machine
(GPU, TPU, TFLite, profiler, ...) are accepted and logged as having no
effect, so the compose file's command line runs unchanged.
``--ssl_config_file`` secures the gRPC listeners (TCP and UNIX socket) with
TLS, or mutual TLS with ``client_verify``, as TF Serving does; the REST port
stays plain HTTP, as TF Serving's has no TLS (a gateway terminates TLS for
REST). ``--use_alts_credentials`` is refused.

Syntax is a superset of TF Serving's: ``--flag=value`` and ``--flag value``;
booleans also as a bare ``--flag`` and ``--flag=true|false|1|0``. As in TF
Serving, an unknown argument is reported and ignored, and a bad value for a
known flag is an error.

Embedded-only extensions, not TF Serving flags (their help says EMBEDDED-ONLY),
bound what one client may hold on the REST port:
``--rest_api_max_body_bytes`` (default 64 MiB; larger bodies, also once
inflated from gzip, get 413), ``--rest_api_read_timeout_seconds`` (default 30:
headers, body and keep-alive idle time; 408 or a closed connection),
``--rest_api_max_connections`` (default 1024, at most a quarter of RLIMIT_NOFILE)
and ``--rest_api_max_concurrent_requests`` (default 256; more get 429 at once), and
``--grpc_read_timeout_seconds`` (REST's 30 s), ``--grpc_max_connections`` (REST's 1024) and
``--grpc_max_concurrent_streams`` (0: twice the admission bound, per connection) bound the gRPC port the same way
(``serving.server.frontends.grpc_limits``), and
``--bind_address`` (default 127.0.0.1) is the address the gRPC and REST
listeners bind, where TF Serving binds every interface (0.0.0.0).
``--grpc_max_concurrent_rpcs`` (0: 4 x ``--grpc_max_threads``, at least 256 like
REST's bound, so that a load test holding a few dozen calls in flight is never
refused) bounds the gRPC calls being handled or waiting for a thread; more are
refused at once with RESOURCE_EXHAUSTED (grpc's ``maximum_concurrent_rpcs``),
never queued.
``--max_tensor_elements`` (0: ``default_max_tensor_elements()``, 2**28 or less
on a small host) bounds the elements of one request's input tensors together,
counted from their shapes before anything is allocated; more are refused with
INVALID_ARGUMENT. ``--max_request_memory_bytes`` (0: an eighth of the
memory, ``memory_budget_bytes()``: physical memory or the cgroup's limit if
less) refuses with INVALID_ARGUMENT a request whose projected peak memory
(``serving.server.admission``) is over it; ``--max_in_flight_memory_bytes``
(0: half of the memory) refuses with RESOURCE_EXHAUSTED one that would take
the admitted requests together past it; ``--rest_api_max_body_bytes_in_flight``
(0: an eighth of the memory) bounds the REST bodies being read and held
together (429). ``--log_format`` (default ``text``, TF Serving's line shape;
``json``: one JSON object per line, ``serving.server.logs``) sets the log output.
``--request_capture_dir`` (empty: off), ``--request_capture_sample_rate``,
``--request_capture_max_bytes``, ``--request_capture_max_bytes_per_day``,
``--request_capture_exclude_models`` and ``--request_capture_queue_size``
capture sampled requests and responses as PredictionLog TFRecords
(``serving.server.request_capture``; TF Serving's open-source binary has no
request logger).
"""
from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Optional, Sequence, TypeVar, Union

from serving import status
from serving.server.logs import LOG_FORMATS

__all__ = [
    "ServerFlags",
    "CommandLine",
    "FlagError",
    "parse_flags",
    "log_no_effect",
    "validate_flags",
    "usage",
    "NO_EFFECT_FLAGS",
    "DEFAULT_REST_API_MAX_BODY_BYTES",
    "DEFAULT_BIND_ADDRESS",
    "DEFAULT_REST_API_READ_TIMEOUT_SECONDS",
    "DEFAULT_REST_API_MAX_CONNECTIONS",
    "DEFAULT_REST_API_MAX_CONCURRENT_REQUESTS",
    "DEFAULT_GRPC_READ_TIMEOUT_SECONDS",
    "DEFAULT_GRPC_MAX_CONNECTIONS",
    "DEFAULT_GRPC_MAX_CONCURRENT_STREAMS",
    "MAX_TENSOR_ELEMENTS_CAP",
    "DEFAULT_REQUEST_CAPTURE_MAX_BYTES",
    "DEFAULT_REQUEST_CAPTURE_QUEUE_SIZE",
    "default_max_tensor_elements",
    "effective_max_tensor_elements",
    "effective_grpc_max_concurrent_rpcs",
    "memory_budget_bytes",
    "effective_memory_budgets",
    "effective_grpc_max_concurrent_streams",
    "LOG_FORMATS",
    "effective_quarantine_dir",
    "effective_grpc_max_receive_message_bytes",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")
FlagValue = Union[bool, int, float, str]
"""A flag's value as parsed: by the type of its ``ServerFlags`` field."""
_CPUS = os.cpu_count() or 1
DEFAULT_REST_API_MAX_BODY_BYTES = 64 * 1024 * 1024
DEFAULT_REST_API_READ_TIMEOUT_SECONDS = 30
DEFAULT_REST_API_MAX_CONNECTIONS = 1024
DEFAULT_REST_API_MAX_CONCURRENT_REQUESTS = 256
DEFAULT_GRPC_READ_TIMEOUT_SECONDS = DEFAULT_REST_API_READ_TIMEOUT_SECONDS
DEFAULT_GRPC_MAX_CONNECTIONS = DEFAULT_REST_API_MAX_CONNECTIONS
DEFAULT_BIND_ADDRESS = "127.0.0.1"
MAX_TENSOR_ELEMENTS_CAP = 2**28
DEFAULT_REQUEST_CAPTURE_MAX_BYTES = 1 << 30
DEFAULT_REQUEST_CAPTURE_QUEUE_SIZE = 1024
_MAX_PORT = 65535
_CONCURRENT_RPCS_PER_THREAD = 4
_CONCURRENT_RPCS_FLOOR = DEFAULT_REST_API_MAX_CONCURRENT_REQUESTS
_STREAMS_PER_ADMITTED_CALL = 2
DEFAULT_GRPC_MAX_CONCURRENT_STREAMS = _STREAMS_PER_ADMITTED_CALL * _CONCURRENT_RPCS_FLOOR   # with the default bound


def _flag(default: T, help: str, *, no_effect: str = "") -> T:
    return field(default=default, metadata={"help": help, "no_effect": no_effect})


@dataclass(frozen=True)
class ServerFlags:
    """Parsed flags; field names are TF Serving's flag names.

    ``rest_api_num_threads`` and ``grpc_max_threads`` default to 4 x CPUs as
    in ``server.h``; ``saved_model_tags`` defaults to ``"serve"`` and
    ``model_name`` to ``"default"`` (``Server::Options::Options()``).
    """

    port: int = _flag(8500, "TCP port for gRPC; 0 disables it.")
    grpc_socket_path: str = _flag("", "If non-empty, also listen for gRPC on this UNIX socket.")
    rest_api_port: int = _flag(0, "Port for HTTP/REST; 0 disables it. Must differ from --port.")
    rest_api_num_threads: int = _flag(4 * _CPUS, "Threads for HTTP/REST processing.")
    rest_api_timeout_in_ms: int = _flag(30000, "Timeout for HTTP/REST API calls.")
    rest_api_enable_cors_support: bool = _flag(False, "Enable CORS headers in responses.")
    enable_batching: bool = _flag(False, "Enable batching.")
    allow_version_labels_for_unavailable_models: bool = _flag(
        False, "Allow assigning unused version labels to models that are not available yet.")
    batching_parameters_file: str = _flag("", "Text BatchingParameters file; needs --enable_batching.")
    enable_per_model_batching_parameters: bool = _flag(
        False, "Read batching_params.pbtxt from each SavedModel.",
        no_effect="per-model batching files are not read; --batching_parameters_file applies to all models")
    model_config_file: str = _flag("", "Text ModelServerConfig file (overrides --model_name/--model_base_path).")
    model_config_file_poll_wait_seconds: int = _flag(
        0, "Seconds between polls of --model_config_file; 0 reads it once.")
    model_name: str = _flag("default", "Name of the model (ignored with --model_config_file).")
    model_base_path: str = _flag("", "Path to the export (ignored with --model_config_file).")
    num_load_threads: int = _flag(0, "Load thread-pool size.", no_effect="versions load one at a time")
    num_unload_threads: int = _flag(0, "Unload thread-pool size.", no_effect="versions unload one at a time")
    max_num_load_retries: int = _flag(5, "Retries after a failed load.")
    load_retry_interval_micros: int = _flag(60_000_000, "Microseconds between load retries.")
    file_system_poll_wait_seconds: int = _flag(1, "Seconds between polls for new versions.")
    flush_filesystem_caches: bool = _flag(True, "Flush filesystem caches after loads.",
                                          no_effect="there are no filesystem caches to flush")
    tensorflow_session_parallelism: int = _flag(0, "Threads for a session (intra and inter op).")
    tensorflow_session_config_file: str = _flag(
        "", "Text ConfigProto for the session.",
        no_effect="the session ConfigProto is not applied; use the parallelism flags")
    tensorflow_intra_op_parallelism: int = _flag(0, "Threads to parallelise one op.")
    tensorflow_inter_op_parallelism: int = _flag(0, "Ops that may run at the same time.")
    use_alts_credentials: bool = _flag(False, "Use Google ALTS credentials (not supported here).")
    ssl_config_file: str = _flag(
        "", "Text SSLConfig (server_key, server_cert, custom_ca, client_verify) for a secure gRPC port: TLS, "
            "or mutual TLS with client certificates verified against custom_ca when client_verify is true. "
            "As in TF Serving, the HTTP/REST port has no TLS and stays plain HTTP.")
    platform_config_file: str = _flag(
        "", "Text PlatformConfigMap.", no_effect="only the TensorFlow platform exists here")
    per_process_gpu_memory_fraction: float = _flag(
        0.0, "Fraction of GPU memory per process.", no_effect="there is no GPU")
    saved_model_tags: str = _flag("serve", "Comma-separated meta graph tags to load.")
    grpc_channel_arguments: str = _flag("", "Comma-separated key=value gRPC server arguments.")
    grpc_max_threads: int = _flag(4 * _CPUS, "Max gRPC threads.")
    enable_model_warmup: bool = _flag(True, "Replay assets.extra/tf_serving_warmup_requests at load.")
    num_request_iterations_for_warmup: int = _flag(0, "Warmup replay count; used only if > 0.")
    version: bool = _flag(False, "Display version.")
    monitoring_config_file: str = _flag("", "Text MonitoringConfig (Prometheus endpoint).")
    remove_unused_fields_from_bundle_metagraph: bool = _flag(
        True, "Drop unused MetaGraphDef fields.", no_effect="the SavedModel is held by TensorFlow's Python API")
    prefer_tflite_model: bool = _flag(False, "Prefer model.tflite.", no_effect="TFLite is not supported")
    num_tflite_pools: int = _flag(_CPUS, "TFLite pools.", no_effect="TFLite is not supported")
    num_tflite_interpreters_per_pool: int = _flag(1, "TFLite interpreters.", no_effect="TFLite is not supported")
    enable_signature_method_name_check: bool = _flag(
        False, "Enforce SignatureDef method_name for Classify/Regress.",
        no_effect="method_name is not enforced (TF Serving's default)")
    xla_cpu_compilation_enabled: bool = _flag(
        False, "Enable XLA:CPU JIT.",
        no_effect="XLA JIT cannot be switched off in-process; jit_compile models run either way")
    xla_gpu_compilation_enabled: bool = _flag(
        False, "Enable XLA:CPU and XLA:GPU JIT (TF Serving > 2.17).", no_effect="there is no GPU")
    enable_profiler: bool = _flag(True, "Profiler gRPC service.", no_effect="no profiler service is registered")
    thread_pool_factory_config_file: str = _flag(
        "", "Text ThreadPoolConfig.", no_effect="requests run on the server's own thread pools")
    mixed_precision: str = _flag("", "Mixed-precision mode.", no_effect="models run as exported")
    skip_initialize_tpu: bool = _flag(False, "Skip TPU initialisation.", no_effect="there is no TPU")
    enable_grpc_healthcheck_service: bool = _flag(
        False, "Standard gRPC health service.")
    enable_serialization_as_tensor_content: bool = _flag(
        False, "Predict responses use tensor_content (TF Serving > 2.17).")
    rest_api_max_body_bytes: int = _flag(
        DEFAULT_REST_API_MAX_BODY_BYTES,
        "EMBEDDED-ONLY extension: largest REST request body in bytes, also after gzip inflation; "
        "larger ones get 413.")
    rest_api_read_timeout_seconds: int = _flag(
        DEFAULT_REST_API_READ_TIMEOUT_SECONDS,
        "EMBEDDED-ONLY extension: seconds a REST connection may take to send request headers, to send a "
        "request body, or stay idle between requests; then 408 or the connection is closed. 0 disables.")
    rest_api_max_connections: int = _flag(
        DEFAULT_REST_API_MAX_CONNECTIONS,
        "EMBEDDED-ONLY extension: open REST connections at most (capped at a quarter of RLIMIT_NOFILE); over it "
        "the least recently active idle connection is closed, or the new one gets 503 and is closed.")
    rest_api_max_concurrent_requests: int = _flag(
        DEFAULT_REST_API_MAX_CONCURRENT_REQUESTS,
        "EMBEDDED-ONLY extension: REST requests (bodies read) in progress at most; more get 429 at once, "
        "never queued.")
    bind_address: str = _flag(
        DEFAULT_BIND_ADDRESS,
        "EMBEDDED-ONLY extension: IP address (or host name) the gRPC and HTTP/REST ports listen on; "
        "0.0.0.0 listens on every interface, as TF Serving does.")
    grpc_max_concurrent_rpcs: int = _flag(
        0, "EMBEDDED-ONLY extension: gRPC calls handled or waiting for a thread at once; more get "
           "RESOURCE_EXHAUSTED at once. 0 means 4 x --grpc_max_threads, at least 256. A call counts once "
           "its request message has arrived.")
    grpc_read_timeout_seconds: int = _flag(
        DEFAULT_GRPC_READ_TIMEOUT_SECONDS,
        "EMBEDDED-ONLY extension: seconds a gRPC connection may take to finish its handshake, a call may take "
        "to send its request message, or a connection may stay without calls; then the handshake fails, the "
        "call gets DEADLINE_EXCEEDED, the connection gets GOAWAY. 0 disables.")
    grpc_max_connections: int = _flag(
        DEFAULT_GRPC_MAX_CONNECTIONS,
        "EMBEDDED-ONLY extension: open gRPC connections at most (capped at a quarter of RLIMIT_NOFILE); a "
        "connection over it is closed when accepted.")
    grpc_max_concurrent_streams: int = _flag(
        0,
        "EMBEDDED-ONLY extension: open calls per gRPC connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); "
        "gRPC clients queue more, others get RST_STREAM. 0 means twice the admission bound "
        "(--grpc_max_concurrent_rpcs; 512 by default), so that admission, not this limit, refuses a client: "
        "a client over the bound gets RESOURCE_EXHAUSTED at once instead of queueing in its channel, and the "
        "streams the server has not yet released leave no room for a REFUSED_STREAM (at 128, one channel "
        "under 4x overload got 16 of 1338 calls UNAVAILABLE). A stalled stream costs ~22 kB until the read "
        "timeout ends it.")
    grpc_max_receive_message_bytes: int = _flag(
        0, "EMBEDDED-ONLY extension: largest gRPC request message in bytes, also once inflated from "
           "grpc-encoding gzip (RESOURCE_EXHAUSTED); and the bytes a request's tensors may hold once decoded, "
           "strings and broadcast values counted per element, unless the message itself is larger than a 32nd "
           "of that (INVALID_ARGUMENT). 0 means --rest_api_max_body_bytes (64 MiB): REST's body limit.")
    max_tensor_elements: int = _flag(
        0, "EMBEDDED-ONLY extension: most elements the input tensors of one request may hold together, "
           "checked from their shapes before anything is allocated; more get INVALID_ARGUMENT. "
           "0 means 2**28, or physical memory / 64 bytes if less.")
    max_request_memory_bytes: int = _flag(
        0, "EMBEDDED-ONLY extension (TF Serving has no such limit): most memory one Predict/Classify/Regress "
           "may be projected to take while it runs (rows x the model's memory per row measured at warmup, plus "
           "its input bytes; without warmup 8 x its input bytes); more get INVALID_ARGUMENT before it runs. "
           "0 means an eighth of physical memory (or of the cgroup's memory limit if less).")
    max_in_flight_memory_bytes: int = _flag(
        0, "EMBEDDED-ONLY extension (TF Serving has no such limit): most memory the requests running at once "
           "may be projected to take together; a request that would pass it gets RESOURCE_EXHAUSTED. "
           "0 means half of physical memory (or of the cgroup's memory limit if less).")
    rest_api_max_body_bytes_in_flight: int = _flag(
        0, "EMBEDDED-ONLY extension (TF Serving has no such limit): most bytes of REST request bodies being "
           "read or held by requests in progress, together; a body that would pass it gets 429. "
           "0 means an eighth of physical memory (or of the cgroup's memory limit if less).")
    quarantine_dir: str = _flag(
        "", "EMBEDDED-ONLY extension: directory of crash markers. A version whose load or warmup kills the process "
            "is quarantined there and never loaded again until cleared (python -m serving.server.quarantine); the "
            "previous version serves instead. Empty: a directory under the temporary directory named after this "
            "server's --model_config_file (or --model_base_path), so a restart finds it. 'none' disables it.")
    log_format: str = _flag(
        "text", "EMBEDDED-ONLY extension: log output, text (TF Serving's line shape) or json (one JSON object "
                "per line: time, level, logger, message, and request_id and exception where present).")
    request_capture_dir: str = _flag(
        "", "EMBEDDED-ONLY extension (TF Serving's open-source server cannot log requests): directory the sampled "
            "Predict/Classify/Regress/MultiInference requests and their responses are written to, as "
            "tensorflow.serving.PredictionLog records in TFRecord files (docs/capture.md); created with mode 0700, "
            "files 0600. Never headers, API keys or client certificates. Empty: no capture.")
    request_capture_sample_rate: float = _flag(
        0.01, "EMBEDDED-ONLY extension: share of successful requests captured with --request_capture_dir, 0 to 1; "
              "exactly that share of every model's requests, evenly spaced.")
    request_capture_max_bytes: int = _flag(
        DEFAULT_REQUEST_CAPTURE_MAX_BYTES,
        "EMBEDDED-ONLY extension: the byte budget of --request_capture_dir's capture files (all origins); "
        "when the next record would pass it, capture stops (records dropped and counted, one warning) until "
        "files are removed. The server keeps serving.")
    request_capture_max_bytes_per_day: int = _flag(
        0, "EMBEDDED-ONLY extension: the byte budget of the capture files opened on one UTC day; 0: none.")
    request_capture_exclude_models: str = _flag(
        "", "EMBEDDED-ONLY extension: comma-separated model names whose requests are never captured.")
    request_capture_queue_size: int = _flag(
        DEFAULT_REQUEST_CAPTURE_QUEUE_SIZE,
        "EMBEDDED-ONLY extension: captured requests waiting for the capture file's writer thread at most; a "
        "request that finds the queue full is not captured (counted as dropped_queue_full), never delayed.")


@dataclass(frozen=True)
class CommandLine:
    """What ``parse_flags`` found: the flags, which were given, and unknown arguments."""

    flags: ServerFlags
    given: frozenset[str]
    unknown: tuple[str, ...]


NO_EFFECT_FLAGS: frozenset[str] = frozenset(
    f.name for f in dataclasses.fields(ServerFlags) if f.metadata.get("no_effect"))

_FIELDS = {f.name: f for f in dataclasses.fields(ServerFlags)}


class FlagError(ValueError):
    """A bad value for a known flag; TF Serving prints the usage and exits -1."""


def _parse_bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise FlagError(f"Couldn't interpret value {text} for flag {name}.")


def _convert(name: str, text: str) -> FlagValue:
    kind = _FIELDS[name].type
    if kind == "bool":
        return _parse_bool(name, text)
    try:
        if kind == "int":
            return int(text.strip())
        if kind == "float":
            return float(text.strip())
    except ValueError:
        raise FlagError(f"Couldn't interpret value {text} for flag {name}.") from None
    return text


def _split(arg: str) -> tuple[str, Optional[str]]:
    body = arg[2:] if arg.startswith("--") else arg[1:]
    name, eq, value = body.partition("=")
    return name, (value if eq else None)


def parse_flags(argv: Sequence[str]) -> CommandLine:
    """Parse ``argv`` (without the program name).

    Raises ``FlagError`` for a bad value of a known flag. Unknown arguments are
    returned, not raised, as ``tensorflow::Flags::Parse`` leaves them.
    """
    values: dict[str, FlagValue] = {}
    unknown: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            unknown.extend(args[i:])
            break
        if not arg.startswith("-") or arg == "-":
            unknown.append(arg)
            continue
        name, value = _split(arg)
        if name not in _FIELDS:
            unknown.append(arg)
            continue
        if value is None:
            if _FIELDS[name].type == "bool":
                if i < len(args) and args[i].lower() in ("true", "false", "1", "0"):
                    value, i = args[i], i + 1
                else:
                    value = "true"
            elif i < len(args):
                value, i = args[i], i + 1
            else:
                raise FlagError(f"Flag --{name} needs a value.")
        values[name] = _convert(name, value)
    return CommandLine(ServerFlags(**values), frozenset(values), tuple(unknown))


def validate_flags(flags: ServerFlags) -> None:
    """Refuse the combinations ``Server::BuildAndStart`` refuses, with its messages.

    Raises ``status.InvalidArgument``. ``--rest_api_port`` equal to ``--port`` is
    not an error in TF Serving (REST is skipped with a logged error); the
    server composition root does the same.
    """
    for name in ("port", "rest_api_port"):   # TF Serving: gRPC fails to bind; REST listens on the port mod 65536
        if not 0 <= getattr(flags, name) <= _MAX_PORT:
            raise status.InvalidArgument(
                f"--{name}={getattr(flags, name)} is not a TCP port: it must be between 1 and {_MAX_PORT} "
                "(0 disables it).")
    if flags.port == 0 and not flags.grpc_socket_path:
        raise status.InvalidArgument(
            "At least one of server_options.grpc_port or server_options.grpc_socket_path must be set.")
    if flags.use_alts_credentials and flags.ssl_config_file:
        raise status.InvalidArgument(
            "Either use_alts_credentials must be false or ssl_config_file must be empty.")
    if flags.use_alts_credentials:
        raise status.Unimplemented(
            "The embedded server has no ALTS credentials: --use_alts_credentials is not supported "
            "(use --ssl_config_file for TLS).")
    if not flags.model_base_path and not flags.model_config_file:
        raise status.InvalidArgument(
            "Both server_options.model_base_path and server_options.model_config_file are empty!")
    if not flags.enable_batching and flags.batching_parameters_file:
        raise status.InvalidArgument(
            "server_options.batching_parameters_file is set without setting "
            "server_options.enable_batching to true.")
    if (flags.tensorflow_intra_op_parallelism > 0 and flags.tensorflow_inter_op_parallelism > 0
            and flags.tensorflow_session_parallelism > 0):
        raise status.InvalidArgument(
            "Either configure server_options.tensorflow_session_parallelism or "
            "(server_options.tensorflow_intra_op_parallelism, "
            "server_options.tensorflow_inter_op_parallelism) separately. You cannot configure all.")
    for name in ("rest_api_max_body_bytes", "rest_api_max_connections", "rest_api_max_concurrent_requests",
                 "grpc_max_connections"):
        if getattr(flags, name) <= 0:
            raise status.InvalidArgument(f"--{name} must be positive.")
    for name in ("rest_api_read_timeout_seconds", "grpc_read_timeout_seconds"):
        if getattr(flags, name) < 0:
            raise status.InvalidArgument(f"--{name} must not be negative.")
    if not _is_bind_address(flags.bind_address):
        raise status.InvalidArgument(
            f"--bind_address must be an IP address or host name (e.g. 127.0.0.1, 0.0.0.0, ::1), "
            f"not {flags.bind_address!r}.")

    for name in ("grpc_max_concurrent_rpcs", "grpc_max_concurrent_streams", "grpc_max_receive_message_bytes"):
        if getattr(flags, name) < 0:
            raise status.InvalidArgument(f"--{name} must be positive, or 0 for the default.")
    if flags.max_tensor_elements < 0:
        raise status.InvalidArgument("--max_tensor_elements must be positive, or 0 for the default.")
    for name in ("max_request_memory_bytes", "max_in_flight_memory_bytes", "rest_api_max_body_bytes_in_flight"):
        if getattr(flags, name) < 0:
            raise status.InvalidArgument(f"--{name} must be positive, or 0 for the default.")
    _validate_request_capture(flags)
    if flags.log_format not in LOG_FORMATS:
        raise status.InvalidArgument(f"--log_format must be one of {', '.join(LOG_FORMATS)}, "
                                     f"not {flags.log_format!r}.")


def _validate_request_capture(flags: ServerFlags) -> None:
    """The request capture flags' rules (checked whether or not --request_capture_dir is set)."""
    rate = flags.request_capture_sample_rate
    if not 0.0 <= rate <= 1.0:
        raise status.InvalidArgument(f"--request_capture_sample_rate must be between 0 and 1 (a share of the "
                                     f"requests), not {rate}.")
    for name in ("request_capture_max_bytes", "request_capture_queue_size"):
        if getattr(flags, name) <= 0:
            raise status.InvalidArgument(f"--{name} must be positive.")
    if flags.request_capture_max_bytes_per_day < 0:
        raise status.InvalidArgument("--request_capture_max_bytes_per_day must be positive, or 0 for no daily budget.")
    names = flags.request_capture_exclude_models.split(",") if flags.request_capture_exclude_models else []
    if any(not name.strip() for name in names):
        raise status.InvalidArgument(f"--request_capture_exclude_models must be comma-separated model names, "
                                     f"not {flags.request_capture_exclude_models!r}.")


def _is_bind_address(text: str) -> bool:
    """An IPv4/IPv6 address or a host name, without a port."""
    if ":" in text:
        try:
            ipaddress.IPv6Address(text)
        except ValueError:
            return False
        return True
    return re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?", text) is not None


def _physical_memory_bytes() -> Optional[int]:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _cgroup_memory_limit_bytes() -> Optional[int]:
    """The cgroup v2 (``memory.max``) or v1 (``memory.limit_in_bytes``) limit of this process; None if none."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as limit_file:
                text = limit_file.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:   # v1 writes a huge number for "no limit"
            return int(text)
    return None


def memory_budget_bytes() -> Optional[int]:
    """The memory the server may count on: physical memory, or the cgroup's limit if less; None if unknown."""
    known = [m for m in (_physical_memory_bytes(), _cgroup_memory_limit_bytes()) if m]
    return min(known) if known else None


_REQUEST_MEMORY_SHARE = 8     # one request: an eighth of memory
_IN_FLIGHT_MEMORY_SHARE = 2   # every request at once: half of it, the rest for models and the system


def effective_memory_budgets(flags: ServerFlags, memory_bytes: Optional[int] = None
                             ) -> tuple[Optional[int], Optional[int], Optional[int]]:
    """Per request, in flight, REST bodies in flight: the flags, or shares of ``memory_budget_bytes()`` for 0.

    None (no limit) only when a flag is 0 and the memory cannot be read.
    """
    memory = memory_budget_bytes() if memory_bytes is None else memory_bytes

    def share(value: int, parts: int) -> Optional[int]:
        return value or (memory // parts if memory else None)

    return (share(flags.max_request_memory_bytes, _REQUEST_MEMORY_SHARE),
            share(flags.max_in_flight_memory_bytes, _IN_FLIGHT_MEMORY_SHARE),
            share(flags.rest_api_max_body_bytes_in_flight, _REQUEST_MEMORY_SHARE))


def default_max_tensor_elements(memory_bytes: Optional[int] = None) -> int:
    """``--max_tensor_elements=0``: ``MAX_TENSOR_ELEMENTS_CAP`` (2**28), or less on a small host.

    At 8 bytes an element, one request's tensors may then take at most an
    eighth of physical memory (``memory_bytes``; read from the host when None).
    """
    memory = _physical_memory_bytes() if memory_bytes is None else memory_bytes
    if not memory:
        return MAX_TENSOR_ELEMENTS_CAP
    return max(1, min(MAX_TENSOR_ELEMENTS_CAP, memory // 64))


def effective_max_tensor_elements(flags: ServerFlags) -> int:
    """The element cap the server applies: the flag, or ``default_max_tensor_elements()`` for 0."""
    return flags.max_tensor_elements or default_max_tensor_elements()


def effective_grpc_max_concurrent_rpcs(flags: ServerFlags) -> int:
    """The gRPC admission bound: the flag, or 4 x ``--grpc_max_threads`` (at least 256) for 0.

    The floor: grpc frees a slot only after the handler's future completes, so with 4 x 8 threads on
    a 2-core host a client holding exactly 32 calls in flight was refused now and then.
    """
    return flags.grpc_max_concurrent_rpcs or max(_CONCURRENT_RPCS_FLOOR,
                                                 _CONCURRENT_RPCS_PER_THREAD * max(1, flags.grpc_max_threads))


def effective_grpc_max_concurrent_streams(flags: ServerFlags) -> int:
    """Streams per gRPC connection: the flag, or twice the admission bound for 0 (see the flag's help)."""
    return flags.grpc_max_concurrent_streams or _STREAMS_PER_ADMITTED_CALL * effective_grpc_max_concurrent_rpcs(flags)


def effective_grpc_max_receive_message_bytes(flags: ServerFlags) -> int:
    """The gRPC receive limit: the flag, or REST's body limit (``--rest_api_max_body_bytes``) for 0."""
    return flags.grpc_max_receive_message_bytes or flags.rest_api_max_body_bytes


def effective_quarantine_dir(flags: ServerFlags) -> Optional[str]:
    """The crash-marker directory: the flag, None for ``none``, or one per served config under the temp dir."""
    if flags.quarantine_dir.lower() == "none":
        return None
    if flags.quarantine_dir:
        return flags.quarantine_dir
    served = os.path.abspath(flags.model_config_file or flags.model_base_path)
    digest = hashlib.sha256(served.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"serving-quarantine-{os.getuid()}", digest)


def log_no_effect(command_line: CommandLine) -> list[str]:
    """Log each given flag that has no effect here; return their names."""
    names = sorted(n for n in command_line.given if n in NO_EFFECT_FLAGS)
    for name in names:
        logger.warning("Flag --%s=%s is accepted but has no effect in the embedded server: %s",
                       name, getattr(command_line.flags, name), _FIELDS[name].metadata["no_effect"])
    return names


def usage(program: str = "python -m serving.server") -> str:
    """The flag list in the shape of ``tensorflow::Flags::Usage``."""
    lines = [f"usage: {program}", "Flags:"]
    for f in dataclasses.fields(ServerFlags):
        default = f.default
        if isinstance(default, bool):
            default = str(default).lower()
        lines.append(f'\t--{f.name}={default}\t{f.type}\t{f.metadata["help"]}')
    return "\n".join(lines) + "\n"

