"""Locust users for TF Serving: a gRPC user and a REST user.

Importing this module imports locust, which monkey-patches the process with
gevent; only locustfiles import it (the rest of ``loadtest`` never does).

Both users send one prebuilt request (from a capture, its recorded mix of
requests in turn). ``python -m loadtest run`` builds it
once and hands it over as ``--payload-file`` (``loadtest.payloads.
write_payload``). Run by hand, the payload is built here from the custom
arguments that ``add_target_arguments`` registers (``--model``,
``--variant``, ``--signature``, ``--model-version``, ``--label``,
``--batch-size``, ``--model-repo``, ``--input-data``, ``--shape``; each also
read from ``LOCUST_<NAME>``), the same sources in the same order as the CLI:
the metadata, when needed, is read from locust's ``--host`` (``HOST:PORT`` or
``grpc://HOST:PORT`` is gRPC, an ``http(s)://`` URL is REST). The version is
``--model-version`` here, not the project's ``--version``: locust's own
``--version`` prints locust's version.

The connection comes from the environment, never the command line (a key
there is visible to every user in ``/proc``): ``LOCUST_ROOT_CERTIFICATES``
(a PEM CA: TLS; gRPC without it is plaintext, REST follows the URL's scheme),
``LOCUST_CLIENT_CERTIFICATE`` and ``LOCUST_CLIENT_KEY`` (PEM files, mTLS),
``LOCUST_SERVER_NAME`` (gRPC: the name the server's certificate carries), and the
SDK's ``TFS_API_KEY`` (sent as ``x-api-key``) and ``TFS_BEARER_TOKEN``
(``authorization: Bearer``). ``python -m loadtest run`` sets them from its
connection arguments (:data:`CONNECTION_ENV`).
"""
from __future__ import annotations

import argparse
import array
import functools
import itertools
import json
import logging
import os
import ssl
import sys
import time
from pathlib import Path
from typing import Mapping, Optional

import grpc
import grpc.experimental.gevent as grpc_gevent

# locust monkey-patches the process with gevent on import, so it comes first, and only
# locustfiles import this module (the rest of loadtest must never import locust).
from locust import FastHttpUser, User, task
from locust.argument_parser import LocustArgumentParser
from locust.contrib.fasthttp import ResponseContextManager
from locust.env import Environment
from locust.event import Events

from loadtest import DEFAULT_MODEL_REPO
from loadtest.options import CONNECTION_ENV, grpc_address, rest_address
from loadtest.payloads import Payload, Target, build_payload, read_payload
from serving.client import Connection
from serving.codec import parse_shape
from serving.status import ServingError, error_for, from_grpc_status

__all__ = [
    "CONNECTION_ENV",
    "GrpcPredictUser",
    "RestPredictUser",
    "ExactLatencies",
    "add_target_arguments",
    "init_grpc_gevent",
    "payload_for",
    "prepare_locustfile",
    "target_from_options",
]


# A capture's recorded mix: every user of this process takes the next recorded request (gevent: one thread).
_NEXT_RECORDED = itertools.count()


def _read(path: str) -> Optional[bytes]:
    return Path(path).read_bytes() if path else None


def _auth_metadata(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The credential headers (gRPC metadata, HTTP headers) from ``TFS_API_KEY`` / ``TFS_BEARER_TOKEN``."""
    metadata = []
    if env.get("TFS_API_KEY"):
        metadata.append(("x-api-key", env["TFS_API_KEY"].strip()))
    if env.get("TFS_BEARER_TOKEN"):
        metadata.append(("authorization", f"Bearer {env['TFS_BEARER_TOKEN'].strip()}"))
    return metadata


def _grpc_channel(target: str, options: list, env: Mapping[str, str]) -> grpc.Channel:
    """A TLS channel when ``LOCUST_ROOT_CERTIFICATES`` is set (mTLS with the client pair), else plaintext."""
    root = _read(env.get("LOCUST_ROOT_CERTIFICATES", ""))
    if root is None:
        return grpc.insecure_channel(target, options=options)
    credentials = grpc.ssl_channel_credentials(root, _read(env.get("LOCUST_CLIENT_KEY", "")),
                                               _read(env.get("LOCUST_CLIENT_CERTIFICATE", "")))
    if env.get("LOCUST_SERVER_NAME"):
        options = [*options, ("grpc.ssl_target_name_override", env["LOCUST_SERVER_NAME"])]
    return grpc.secure_channel(target, credentials, options=options)


def _ssl_context() -> ssl.SSLContext:
    """The REST user's TLS: trusts ``LOCUST_ROOT_CERTIFICATES`` (else the system's CAs), presents the client pair."""
    import gevent.ssl

    env = os.environ
    context = gevent.ssl.create_default_context(cafile=env.get("LOCUST_ROOT_CERTIFICATES") or None)
    if env.get("LOCUST_CLIENT_CERTIFICATE"):
        context.load_cert_chain(env["LOCUST_CLIENT_CERTIFICATE"], env.get("LOCUST_CLIENT_KEY") or None)
    return context


def add_target_arguments(parser: LocustArgumentParser) -> None:
    """Register the target options on locust's argument parser (an ``init_command_line_parser`` listener)."""
    group = parser.add_argument_group("tfs-stack target")
    group.add_argument("--model", default="digits", env_var="LOCUST_MODEL", help="model name (before variant suffix)")
    group.add_argument("--variant", default="fp32", env_var="LOCUST_VARIANT", help="fp32 | xla | trt-fp16")
    group.add_argument("--signature", default="", env_var="LOCUST_SIGNATURE", help="signature (default serving_default)")
    # locust's own --version prints locust's version, so the target's version is --model-version here.
    group.add_argument("--model-version", type=int, default=0, env_var="LOCUST_MODEL_VERSION",
                       help="specific version (0 = latest)")
    group.add_argument("--label", default="", env_var="LOCUST_LABEL", help="version label, e.g. stable")
    group.add_argument("--batch-size", type=int, default=0, env_var="LOCUST_BATCH_SIZE",
                       help="rows per request (0 = one row, or the --input-data file's rows)")
    group.add_argument("--model-repo", default=str(DEFAULT_MODEL_REPO), env_var="LOCUST_MODEL_REPO",
                       help="model repository holding <name>/<version>/manifest.json")
    group.add_argument("--input-data", default="", env_var="LOCUST_INPUT_DATA",
                       help="request inputs: an .npz or a TF Serving REST Predict body (.json)")
    group.add_argument("--shape", action="append", default=[], help="NAME:d1,d2 for an input whose dimensions "
                       "after the batch the server's metadata leaves unknown (repeatable)")
    group.add_argument("--payload-file", default="", env_var="LOCUST_PAYLOAD_FILE",
                       help="a prebuilt payload (python -m loadtest run writes one); "
                            "the options above are then unused")
    group.add_argument("--request-timeout", type=float, default=30.0, env_var="LOCUST_REQUEST_TIMEOUT",
                       help="per-request deadline, seconds")
    group.add_argument("--think-time", type=float, default=0.0, env_var="LOCUST_THINK_TIME",
                       help="seconds each user waits between requests (0 = closed loop)")


def prepare_locustfile(events: Events) -> None:
    """What every locustfile does first: gevent-ready grpc, the target options, a fail-fast payload check."""
    init_grpc_gevent()
    events.init_command_line_parser.add_listener(add_target_arguments)
    events.init.add_listener(_check_payload)
    recorder = ExactLatencies()
    events.request.add_listener(recorder.on_request)
    events.quitting.add_listener(recorder.on_quitting)


class ExactLatencies:
    """Exact response times and final totals, written when locust quits (after every user stopped).

    Locust keeps response times rounded to two significant digits and writes
    its CSV files only once a second (the last second is missing from them).
    This listener writes every response time of its process (ms, 8 bytes
    each) to ``<csv prefix>_exact_<pid>.bin``, and, in the process that holds
    the totals (not a worker), ``<csv prefix>_final.json``: requests,
    failures, throughput and errors as locust prints them at the end.
    """

    def __init__(self) -> None:
        self.times = array.array("d")

    def on_request(self, response_time: float, **_: object) -> None:
        self.times.append(response_time)

    def on_quitting(self, environment: Environment, **_: object) -> None:
        prefix = getattr(environment.parsed_options, "csv_prefix", None)
        if not prefix:
            return
        if self.times:
            with open(f"{prefix}_exact_{os.getpid()}.bin", "wb") as handle:
                self.times.tofile(handle)
        if type(environment.runner).__name__ != "WorkerRunner":
            total = environment.stats.total
            final = {"requests": total.num_requests, "failures": total.num_failures, "rps": total.total_rps,
                     "avg_ms": total.avg_response_time, "max_ms": total.max_response_time,
                     "errors": {f"{e.method} {e.name}: {e.error}": e.occurrences
                                for e in environment.stats.errors.values()}}
            with open(f"{prefix}_final.json", "w") as handle:
                json.dump(final, handle)


def _check_payload(environment: Environment, **_: object) -> None:
    """Build the payload before any user starts; exit 2 with the reason if it cannot be built."""
    if environment.parsed_options is None:
        return
    try:
        payload = payload_for(environment)
    except Exception as error:  # no source gives inputs: no point starting users
        logging.getLogger("loadtest").error("cannot build the request payload: %s: %s", type(error).__name__, error)
        sys.exit(2)
    logging.getLogger("loadtest").info("payload %s: %d gRPC request bytes, from %s", payload.label,
                                       len(payload.grpc_request), payload.source)


def target_from_options(options: argparse.Namespace) -> Target:
    """The ``Target`` that locust's parsed options describe."""
    return Target(
        model=options.model,
        variant=options.variant,
        signature=options.signature or None,
        version=options.model_version or None,
        version_label=options.label or None,
        batch_size=options.batch_size or None,
        model_repo=Path(options.model_repo),
        input_data=Path(options.input_data) if options.input_data else None,
        shapes=tuple(parse_shape(text) for text in options.shape),
    )


def _env_connection() -> Connection:
    """The connection of :data:`loadtest.options.CONNECTION_ENV` (for the metadata read of a run by hand)."""
    env = os.environ

    def path(name: str) -> Optional[Path]:
        return Path(env[name]) if env.get(name) else None
    return Connection(root_certificates=path("LOCUST_ROOT_CERTIFICATES"), client_cert=path("LOCUST_CLIENT_CERTIFICATE"),
                      client_key=path("LOCUST_CLIENT_KEY"), server_name=env.get("LOCUST_SERVER_NAME") or None,
                      api_key=(env.get("TFS_API_KEY") or "").strip() or None,
                      bearer_token=(env.get("TFS_BEARER_TOKEN") or "").strip() or None)


@functools.lru_cache(maxsize=None)
def _payload(target: Target, host: str) -> Payload:
    if host.startswith(("http://", "https://")):
        return build_payload(target, rest=rest_address(host), connection=_env_connection())
    return build_payload(target, grpc=grpc_address(host) if host else None, connection=_env_connection())


@functools.lru_cache(maxsize=None)
def _read_payload(path: str) -> Payload:
    return read_payload(path)


def _parsed_options(environment: Environment) -> argparse.Namespace:
    """The locust command line's options (``add_arguments``'s included); locust parses them before any user starts."""
    if environment.parsed_options is None:
        raise RuntimeError("the tfs-stack users read their target from locust's options: run them under the locust CLI")
    return environment.parsed_options


def payload_for(environment: Environment) -> Payload:
    """The payload for this locust environment, read or built once per process."""
    options = _parsed_options(environment)
    if options.payload_file:
        return _read_payload(options.payload_file)
    return _payload(target_from_options(options), environment.host or "")


@functools.lru_cache(maxsize=1)
def init_grpc_gevent() -> None:
    """Make grpc cooperate with gevent; must run before the first channel (idempotent)."""
    grpc_gevent.init_gevent()


class _ThinkTime:
    environment: Environment   # the locust User's

    def wait_time(self) -> float:
        return float(getattr(self.environment.parsed_options, "think_time", 0.0) or 0.0)


class GrpcPredictUser(_ThinkTime, User):
    """Sends the prebuilt ``PredictRequest`` bytes over one channel per user.

    ``host`` is ``HOST:PORT`` or ``grpc://HOST:PORT``. Each call fires ``events.request``
    with its response time (ms), response length (bytes) and, on failure,
    the ``serving.status`` error carrying TF Serving's code and message.
    """

    abstract = True

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        init_grpc_gevent()
        self.payload = payload_for(environment)
        self.timeout = float(_parsed_options(environment).request_timeout)
        self.channel = _grpc_channel(_grpc_target(self.host), [
            ("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1),
            ("grpc.use_local_subchannel_pool", 1)], os.environ)  # its own TCP connection, like a separate client
        self._call = self.channel.unary_unary(self.payload.grpc_method)  # bytes in, bytes out
        self._metadata = tuple(_auth_metadata(os.environ)) or None
        self._name = f"Predict {self.payload.label}"

    def on_stop(self) -> None:
        self.channel.close()

    @task
    def predict(self) -> None:
        start = time.perf_counter()
        response: Optional[bytes] = None
        exception: Optional[Exception] = None
        request = (self.payload.mix[next(_NEXT_RECORDED) % len(self.payload.mix)].grpc_request if self.payload.mix
                   else self.payload.grpc_request)
        try:
            response = self._call(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            exception = _status_error(error)
        self.environment.events.request.fire(
            request_type="grpc", name=self._name,
            response_time=(time.perf_counter() - start) * 1000.0,
            response_length=len(response) if response is not None else 0,
            response=response, context={}, exception=exception)


class RestPredictUser(_ThinkTime, FastHttpUser):
    """POSTs the prebuilt JSON body to ``/v1/models/NAME[...]:predict`` (``host`` is a URL; https:// verifies
    the server against ``LOCUST_ROOT_CERTIFICATES`` or the system's CAs)."""

    abstract = True
    insecure = False
    ssl_context_factory = staticmethod(_ssl_context)

    def on_start(self) -> None:
        self.payload = payload_for(self.environment)
        self.body = self.payload.rest_body
        self.bodies = [r.rest_body for r in self.payload.mix]   # a capture's recorded mix, sent in turn
        self.timeout = float(_parsed_options(self.environment).request_timeout)
        self._name = f"POST {self.payload.rest_path}"
        self._headers = {"Content-Type": "application/json", **dict(_auth_metadata(os.environ))}

    @task
    def predict(self) -> None:
        headers = self._headers
        body = self.bodies[next(_NEXT_RECORDED) % len(self.bodies)] if self.bodies else self.body
        # ignore: locust annotates data as str | dict, but its docstring says "String/bytes" and geventhttpclient
        # sends bytes as they are (the body is encoded once, not per call)
        with self.client.post(self.payload.rest_path, data=body, headers=headers,  # type: ignore[arg-type]
                              name=self._name, catch_response=True) as response:
            if response.status_code != 200:
                response.failure(_rest_error(response))


def _grpc_target(host: Optional[str]) -> str:
    """``HOST:PORT`` of the gRPC user's ``--host``; an http(s) URL is REST's and refused (options.grpc_address)."""
    if not host:
        raise ValueError("the gRPC user needs --host HOST:PORT")
    return grpc_address(host, flag="--host")


def _status_error(error: grpc.RpcError) -> ServingError:
    return error_for(from_grpc_status(error.code()), error.details() or "")


def _rest_error(response: ResponseContextManager) -> str:
    try:
        message = json.loads(response.content or b"{}").get("error", "")
    except (ValueError, AttributeError):
        message = (response.text or "")[:200]
    # a response has ``error`` only when the request failed in transport (locust sets it then)
    detail = message or getattr(response, "error", None)
    return f"HTTP {response.status_code}: {detail}" if detail else f"HTTP {response.status_code}"
