"""REST front-end (aiohttp): TF Serving's ``/v1/models/...`` API, routes and messages.

Routing is TF Serving's, not aiohttp's: a request whose path fully matches
``(?i)/v1/.*`` is dispatched (``http_rest_api_util.h``); POST must match the
predict/classify/regress regex and GET the status/metadata regex, otherwise
the answer is 400 "Malformed request: METHOD PATH". Every ``/v1`` answer is
``Content-Type: application/json`` and errors are ``{"error": "..."}`` with
``http_server.cc``'s status mapping (``serving.status.to_http_status``). The
Prometheus page is served at the monitoring config's path as ``text/plain``.

The event loop only routes and reads bodies. Decoding, the one data-plane
call and encoding run on a pool of ``--rest_api_num_threads`` threads, bounded
by ``--rest_api_timeout_in_ms`` (504 / DEADLINE_EXCEEDED). Bodies larger than
``max_body_bytes`` are refused with 400 before they are read.

Checks run in TF Serving's order: the JSON document first, then the model and
its signature (``DataPlane.signature``, as ``GetInfoMap`` does), then the
inputs decoded with that signature's dtypes, then the model run.
"""
from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
import urllib.parse
from concurrent import futures
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Protocol, Sequence

from aiohttp import web
from google.protobuf import json_format

from serving import codec, status
from serving.server.core.state import VersionStatus
from serving.server.frontends.dataplane import SIGNATURE_DEF_METADATA_FIELD, DataPlane, ModelMetadata, ModelSpec
from serving.server.metrics import CONTENT_TYPE as PROMETHEUS_CONTENT_TYPE

if TYPE_CHECKING:  # loads TensorFlow; only annotates
    from tensorflow_serving.apis.input_pb2 import Input

__all__ = [
    "MetricsPage",
    "RestFrontend",
    "RestRoute",
    "parse_route",
    "DISPATCH_REGEX",
    "PREDICTION_API_REGEX",
    "MODEL_STATUS_API_REGEX",
]

logger = logging.getLogger(__name__)

# http_rest_api_util.{h,cc}, matched in full like RE2::FullMatch. ASCII: RE2's \d is [0-9].
DISPATCH_REGEX = re.compile(r"(?i)/v1/.*", re.ASCII)
PREDICTION_API_REGEX = re.compile(
    r"(?i)/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)", re.ASCII)
MODEL_STATUS_API_REGEX = re.compile(
    r"(?i)/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:\/(metadata))?", re.ASCII)

_INT64_MAX = 2**63 - 1
_JSON = "application/json"
_CORS_HEADERS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "POST, GET",
                 "Access-Control-Allow-Headers": "Content-Type"}


class MetricsPage(Protocol):
    """What the REST front-end serves at the monitoring path (``ServerMetrics`` provides it)."""

    def render(self) -> bytes: ...


@dataclass(frozen=True)
class RestRoute:
    """A parsed ``/v1/models`` path: the model, version or label, the verb or subresource."""

    model_name: str
    version: Optional[int] = None
    version_label: Optional[str] = None
    method: str = ""          # predict | classify | regress (POST), "" for GET
    subresource: str = ""     # "metadata" or ""

    def spec(self, signature_name: str = "") -> ModelSpec:
        return ModelSpec(self.model_name, self.version, self.version_label, signature_name)


def parse_route(http_method: str, path: str) -> RestRoute:
    """TF Serving's ``ParseModelInfo``; raises ``InvalidArgument`` as it does."""
    regex = {"POST": PREDICTION_API_REGEX, "GET": MODEL_STATUS_API_REGEX}.get(http_method)
    match = regex.fullmatch(path) if regex else None
    if match is None:
        raise status.InvalidArgument(f"Malformed request: {http_method} {path}")
    name, version_text, label, tail = match.groups()
    version = None
    if version_text:
        version = int(version_text)
        if version > _INT64_MAX:
            raise status.InvalidArgument(f"Failed to convert version: {version_text} to numeric.")
    return RestRoute(
        model_name=urllib.parse.unquote(name or ""),
        version=version,
        version_label=urllib.parse.unquote(label) if label else None,
        method=(tail or "").lower() if http_method == "POST" else "",
        subresource=(tail or "").lower() if http_method == "GET" else "")


def _json_object(body: bytes) -> dict:
    """The request document, which TF Serving requires to be a JSON object."""
    if not body:
        raise status.InvalidArgument("JSON Parse error: The document is empty")
    document = codec.json_loads(body)
    if not isinstance(document, dict):
        raise status.InvalidArgument(f"JSON Value: {codec.json_dumps(document)[:200].decode()} Is not object")
    signature_name = document.get("signature_name", "")
    if not isinstance(signature_name, str):
        raise status.InvalidArgument("'signature_name' key must be a string value.")
    return document


def _examples_input(document: dict) -> Input:
    """A ``tensorflow.serving.Input`` from ``{"context": {...}, "examples": [...]}``."""
    from tensorflow_serving.apis import input_pb2  # loads TensorFlow: only for Classify/Regress requests

    return codec.rest_request_to_input(document, input_pb2.Input())


def _model_status_json(statuses: Sequence[VersionStatus]) -> bytes:
    """``GetModelStatusResponse`` in proto JSON, as TF Serving's REST API writes it (int64 as text)."""
    return codec.json_dumps({"model_version_status": [
        {"version": str(entry.version), "state": entry.state.name,
         "status": {"error_code": entry.error_code.name, "error_message": entry.error_message or ""}}
        for entry in statuses]})


def _metadata_json(metadata: ModelMetadata) -> bytes:
    """``GetModelMetadataResponse`` in proto JSON with its ``SignatureDefMap`` unpacked (keys sorted)."""
    signature_defs = {key: json_format.MessageToDict(metadata.signature_defs[key],
                                                     including_default_value_fields=True,
                                                     preserving_proto_field_name=True)
                      for key in sorted(metadata.signature_defs)}
    return codec.json_dumps({
        "model_spec": {"name": metadata.name, "version": str(metadata.version), "signature_name": ""},
        "metadata": {SIGNATURE_DEF_METADATA_FIELD: {"signature_def": signature_defs}}})


class RestFrontend:
    """The REST server; ``start()`` binds and serves on its own event-loop thread.

    ``stop(grace)`` closes the listening socket at once, lets running requests
    finish for up to ``grace`` seconds, then closes connections.
    """

    def __init__(self, dataplane: DataPlane, *, port: int, host: str = "0.0.0.0", num_threads: int = 4,
                 timeout_ms: int = 30000, max_body_bytes: int = 256 * 1024 * 1024,
                 monitoring_path: Optional[str] = None, metrics: Optional[MetricsPage] = None, enable_cors: bool = False,
                 max_tensor_elements: Optional[int] = None) -> None:
        self._dp = dataplane
        self._host, self._port = host, port
        self._pool = futures.ThreadPoolExecutor(max_workers=max(1, num_threads), thread_name_prefix="rest")
        self._timeout = timeout_ms / 1000.0 if timeout_ms > 0 else None
        self._max_body = max_body_bytes
        self._monitoring_path = monitoring_path
        self._metrics = metrics
        self._cors = enable_cors
        self._max_tensor_elements = max_tensor_elements
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._runner: Optional[web.AppRunner] = None
        self._thread: Optional[threading.Thread] = None
        self._handlers: dict[str, Callable[[RestRoute, bytes, Optional[float]], bytes]] = {
            "predict": self._predict, "classify": self._classify, "regress": self._regress,
            "metadata": self._metadata, "": self._model_status}

    # -- handlers: decode -> one data-plane call -> encode (run on the pool) --
    def _predict(self, route: RestRoute, body: bytes, deadline: Optional[float]) -> bytes:
        document = _json_object(body)
        spec = route.spec(document.get("signature_name", ""))
        signature = self._dp.signature(spec)
        inputs, row_format = codec.rest_request_to_inputs(
            document, {name: tensor.dtype for name, tensor in signature.inputs.items()},
            max_elements=self._max_tensor_elements)
        result = self._dp.predict(spec, inputs, deadline=deadline)
        return codec.outputs_to_rest_response(result.outputs, row_format)

    def _classify(self, route: RestRoute, body: bytes, deadline: Optional[float]) -> bytes:
        document = _json_object(body)
        answer = self._dp.classify(route.spec(document.get("signature_name", "")),
                                   _examples_input(document), deadline=deadline)
        return codec.classification_result_to_rest(answer.result)

    def _regress(self, route: RestRoute, body: bytes, deadline: Optional[float]) -> bytes:
        document = _json_object(body)
        answer = self._dp.regress(route.spec(document.get("signature_name", "")),
                                  _examples_input(document), deadline=deadline)
        return codec.regression_result_to_rest(answer.result)

    def _model_status(self, route: RestRoute, body: bytes, deadline: Optional[float]) -> bytes:
        if not route.model_name:
            raise status.InvalidArgument("Missing model name in request.")
        return _model_status_json(self._dp.model_status(route.spec()))

    def _metadata(self, route: RestRoute, body: bytes, deadline: Optional[float]) -> bytes:
        if not route.model_name:
            raise status.InvalidArgument("Missing model name in request.")
        return _metadata_json(self._dp.model_metadata(route.spec(), [SIGNATURE_DEF_METADATA_FIELD]))

    # -- event loop side ------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.raw_path.split("?", 1)[0]
        if self._monitoring_path is not None and path == self._monitoring_path:
            return self._prometheus()
        if not DISPATCH_REGEX.fullmatch(path):
            return self._reply(404, codec.json_dumps({"error": f"Not found: {request.method} {path}"}))
        try:
            return self._reply(200, await self._serve_v1(request, path))
        except status.ServingError as exc:
            return self._reply(status.to_http_status(exc.code), codec.json_dumps({"error": exc.details}))
        except Exception as exc:  # noqa: BLE001 - the server must answer and stay up
            error = status.internal_error(f"Internal error while handling {request.method} {path}", exc, logger)
            return self._reply(500, codec.json_dumps({"error": error.details}))

    async def _serve_v1(self, request: web.Request, path: str) -> bytes:
        """One ``/v1`` request, counted in the metrics under its model and verb as TF Serving does."""
        route, error = _try_parse_route(request.method, path)
        with self._dp.track(route.model_name, route.method, "REST"):
            if request.method == "OPTIONS":
                if re.search(r"https?://", request.headers.get("Origin", "")) is None:
                    raise status.FailedPrecondition("Origin header is missing in CORS preflight")
                return b""
            if error is not None:
                raise error
            body = await self._read_body(request) if request.method == "POST" else b""
            return await self._run(self._handlers[route.method or route.subresource], route, body)

    async def _read_body(self, request: web.Request) -> bytes:
        declared = request.content_length
        if declared is not None and declared > self._max_body:
            raise self._too_large(declared)
        chunks, size = [], 0
        async for chunk in request.content.iter_chunked(1 << 16):
            size += len(chunk)
            if size > self._max_body:
                raise self._too_large(size)
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_large(self, size: int) -> status.ServingError:
        return status.InvalidArgument(
            f"Request body of {size}{'+' if size else ''} bytes exceeds the limit of {self._max_body} bytes "
            "(embedded server flag --rest_api_max_body_bytes)")

    async def _run(self, handler: Callable, route: RestRoute, body: bytes) -> bytes:
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        call = asyncio.get_running_loop().run_in_executor(self._pool, handler, route, body, deadline)
        try:
            return await asyncio.wait_for(call, self._timeout)
        except asyncio.TimeoutError:
            raise status.DeadlineExceeded(
                f"Timed out waiting for notification (REST call exceeded --rest_api_timeout_in_ms="
                f"{int(self._timeout * 1000)})") from None

    def _reply(self, http_status: int, body: bytes) -> web.Response:
        response = web.Response(status=http_status, body=body, headers={"Content-Type": _JSON})
        if self._cors:
            response.headers.update(_CORS_HEADERS)
        return response

    def _prometheus(self) -> web.Response:
        body = self._metrics.render() if self._metrics is not None else b""
        return web.Response(body=body, headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})

    # -- lifecycle ------------------------------------------------------
    def start(self) -> None:
        """Bind and serve; returns once the port accepts connections (raises if it cannot bind)."""
        ready: futures.Future = futures.Future()
        self._thread = threading.Thread(target=self._serve, args=(ready,), name="rest-loop", daemon=True)
        self._thread.start()
        ready.result()
        logger.info("Exporting HTTP/REST API at:%s:%d ...", self._host, self._port)

    def _serve(self, ready: futures.Future) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._setup())
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            ready.set_exception(exc)
            loop.close()
            return
        ready.set_result(None)
        loop.run_forever()
        loop.close()

    async def _setup(self) -> None:
        app = web.Application(client_max_size=self._max_body + 1)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port, reuse_address=True).start()

    def stop(self, grace: float = 30.0) -> None:
        """Close the listener now; wait up to ``grace`` seconds for running requests."""
        if self._loop is None or self._runner is None:
            return
        runner, loop = self._runner, self._loop
        self._runner = None
        runner._shutdown_timeout = grace  # aiohttp reads it in cleanup(); no public setter
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(grace + 10)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)
        self._pool.shutdown(wait=False, cancel_futures=True)


def _try_parse_route(http_method: str, path: str) -> tuple[RestRoute, Optional[status.ServingError]]:
    try:
        return parse_route(http_method, path), None
    except status.ServingError as exc:
        return RestRoute(""), exc
