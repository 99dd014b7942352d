"""The capture service behind the gateway: records a systematic sample of the requests nginx mirrors to it.

TF Serving (2.17.1, OSS) cannot log its requests, so the gateway copies them: with capture on, every
Predict, Classify, Regress and MultiInference request (REST and gRPC) that the gateway passes to TF
Serving is also sent, by nginx's ``mirror``, to this service (gateway/capture-on.conf.template,
docs/capture-gateway.md). nginx strips the copy down to its body and a few headers of its own
(``x-capture-uri``, ``x-request-id``, ``x-capture-label``, ``x-capture-time``, ``content-type``,
``grpc-encoding``): no API key, Authorization header or client certificate ever reaches this service.

Each copy is answered at once (204) and, when the sampler keeps it, turned into a
``tensorflow.serving.PredictionLog`` (request only: a mirror never sees TF Serving's answer) written by
:class:`serving.capture.CaptureWriter` in rotated TFRecord files. REST bodies become the gRPC request
TF Serving would have built: Predict with the signature's input dtypes from TF Serving's own metadata
(``GET /v1/models/<model>[/versions/N|/labels/L]/metadata``, cached per model and version or label),
Classify/Regress as tf.Examples.

Sampling is systematic, not random, so that it can be counted: of the first ``n`` requests of the
captured models that reach the service, exactly ``floor(n * rate)`` are kept (request ``i`` is kept
when ``floor(i * rate) > floor((i - 1) * rate)``). Random per-request sampling would be off by its
binomial noise (at 10 % of 6,000 requests, +-4 % for one standard deviation).

Run: ``python -m serving.capture.gateway_sink --listen 0.0.0.0:8080 --rest http://tfserving:8501
--capture-dir /var/lib/capture --rate 0.1`` (compose's ``capture`` service; settings in ``.env``).
"""
from __future__ import annotations

import argparse
import asyncio
import gzip
import logging
import os
import queue
import re
import signal
import struct
import threading
import time
import urllib.parse
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol, cast

from google.protobuf.message import DecodeError

from serving import codec, status
from serving.capture import CaptureWriter, SystematicSampler, prediction_log
from serving.capture._records import Method
from serving.wire import apis

__all__ = [
    "CaptureSink",
    "LogWriter",
    "MetadataSource",
    "MirroredRequest",
    "RestMetadata",
    "SinkStats",
    "is_inference",
    "main",
    "parse_mirrored",
    "parse_models",
    "parse_rate",
    "to_prediction_log",
]

log = logging.getLogger("serving.capture.gateway_sink")

# TF Serving's PredictionService methods a capture file holds, by gRPC method name.
GRPC_METHODS = {
    "Predict": ("predict", apis.PredictRequest),
    "Classify": ("classify", apis.ClassificationRequest),
    "Regress": ("regress", apis.RegressionRequest),
    "MultiInference": ("multi_inference", apis.MultiInferenceRequest),
}
_GRPC_PATH = re.compile(r"^/tensorflow\.serving\.PredictionService/(?P<method>[A-Za-z]+)$")
# TF Serving's REST inference paths (http_rest_api_handler.cc's regex, without the query).
_REST_PATH = re.compile(r"^/v1/models/(?P<model>[^/:]+)(?:/versions/(?P<version>\d+)|/labels/(?P<label>[^/:]+))?"
                        r":(?P<method>predict|classify|regress)$")
DEFAULT_SIGNATURE = "serving_default"
ORIGIN = "gateway"


class LogWriter(Protocol):
    """What the sink writes with (``serving.capture.CaptureWriter``)."""

    def write(self, log: apis.PredictionLog) -> bool: ...

    def rotate_if_due(self) -> None: ...

    def close(self) -> None: ...


class MetadataSource(Protocol):
    """A REST Predict request's input dtypes: TF Serving's metadata of the model it names."""

    def input_dtypes(self, model: str, version: int | None, label: str | None,
                     signature: str) -> dict[str, Any]: ...


def parse_rate(text: str) -> Fraction:
    """A sampling rate in (0, 1]: ``0.1``, ``10%`` or ``1/10``."""
    raw = text.strip()
    try:
        rate = Fraction(raw[:-1]) / 100 if raw.endswith("%") else Fraction(raw)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"CAPTURE_RATE must be a number in (0, 1], such as 0.1 or 10%: {text!r}") from None
    if not 0 < rate <= 1:
        raise ValueError(f"CAPTURE_RATE must be in (0, 1] (capture is turned off by CAPTURE=off, "
                         f"not by a rate of 0): {text!r}")
    return rate


def parse_models(text: str) -> frozenset[str]:
    """``CAPTURE_MODELS``: model names separated by commas or spaces; empty or ``*`` = every model."""
    names = frozenset(name for name in re.split(r"[\s,]+", text.strip()) if name)
    return frozenset() if names in (frozenset(), frozenset({"*"})) else names


@dataclass(frozen=True)
class MirroredRequest:
    """One request as the gateway's mirror delivered it: where it went and its decoded message (gRPC) or
    its JSON body (REST, converted later, only when kept)."""

    method: str                       # "predict" | "classify" | "regress" | "multi_inference"
    model: str
    version: int | None
    label: str | None
    request_id: str
    time: float                       # unix seconds, the gateway's clock ($msec)
    grpc_message: object | None = None   # the decoded request (gRPC)
    rest_body: bytes | None = None       # the JSON body (REST)


def _header(headers: Mapping[str, str], name: str) -> str:
    return headers.get(name, "") or ""


def _gateway_time(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        return time.time()
    return value if value > 0 else time.time()


def _grpc_message(body: bytes, encoding: str) -> bytes:
    """The one message of a unary gRPC request body (5-byte prefix: compressed flag, big-endian length)."""
    if len(body) < 5:
        raise ValueError("gRPC body shorter than its 5-byte message prefix")
    compressed, length = struct.unpack(">BI", body[:5])
    if len(body) != 5 + length:
        raise ValueError(f"gRPC body holds {len(body) - 5} bytes after its prefix, which announces {length} "
                         "(a unary request has one message)")
    message = body[5:]
    if not compressed:
        return message
    if encoding == "gzip":
        return gzip.decompress(message)
    if encoding == "deflate":
        return zlib.decompress(message)
    raise ValueError(f"gRPC message compressed with {encoding or 'no named encoding'!r} (gzip and deflate are read)")


def is_inference(uri: str, headers: Mapping[str, str]) -> bool:
    """Whether the copy is an inference call the sink records (its path only: nothing is decoded)."""
    path = urllib.parse.urlsplit(uri).path
    if _header(headers, "content-type").startswith("application/grpc"):
        match = _GRPC_PATH.match(path)
        return match is not None and match["method"] in GRPC_METHODS
    return bool(_REST_PATH.match(urllib.parse.unquote(path)))


def parse_mirrored(uri: str, headers: Mapping[str, str], body: bytes) -> MirroredRequest | None:
    """The mirrored request, or None when it is no inference call (status, metadata, health, reload).

    ``headers`` are the mirror's own, lower-case. Raises ValueError for a body that cannot be read.
    """
    path = urllib.parse.urlsplit(uri).path
    request_id = _header(headers, "x-request-id")
    when = _gateway_time(_header(headers, "x-capture-time"))
    if _header(headers, "content-type").startswith("application/grpc"):
        match = _GRPC_PATH.match(path)
        if not match or match["method"] not in GRPC_METHODS:
            return None
        method, message_type = GRPC_METHODS[match["method"]]
        message = message_type()
        try:
            message.ParseFromString(_grpc_message(body, _header(headers, "grpc-encoding")))
        except DecodeError as exc:
            raise ValueError(f"unreadable {message_type.__name__}: {exc}") from None
        spec = message.tasks[0].model_spec if method == "multi_inference" and message.tasks else \
            getattr(message, "model_spec", apis.ModelSpec())
        version = spec.version.value if spec.HasField("version") else None
        label = spec.version_label or None
        return MirroredRequest(method, spec.name, version, label, request_id, when, grpc_message=message)
    match = _REST_PATH.match(urllib.parse.unquote(path))
    if not match:
        return None
    version = int(match["version"]) if match["version"] else None
    label = match["label"] or None
    # A model in canary: the gateway sent a request naming neither to the label its canary route chose.
    routed = _header(headers, "x-capture-label")
    if version is None and label is None and routed:
        label = routed
    return MirroredRequest(match["method"], match["model"], version, label, request_id, when, rest_body=body)


def _rest_signature(document: object) -> str:
    name = document.get("signature_name", "") if isinstance(document, dict) else ""
    return name if isinstance(name, str) else ""


def _rest_request(request: MirroredRequest, metadata: MetadataSource) -> tuple[object, str]:
    """The gRPC request TF Serving builds from a REST body (Predict: typed by the signature's inputs)."""
    body = request.rest_body or b""
    if request.method == "predict":
        document = codec.rest_request_loads(body)
        signature = _rest_signature(document) or DEFAULT_SIGNATURE
        dtypes = metadata.input_dtypes(request.model, request.version, request.label, signature)
        inputs, _ = codec.rest_request_to_inputs(document, dtypes)
        message = apis.PredictRequest()
        for name, array in inputs.items():
            codec.ndarray_to_tensor_proto(array, message.inputs[name])
    else:
        parsed = codec.json_loads(body)
        document = parsed   # a Classify/Regress body: plain JSON (a DenseJSON with no dense array)
        signature = _rest_signature(parsed) or DEFAULT_SIGNATURE
        message = apis.ClassificationRequest() if request.method == "classify" else apis.RegressionRequest()
        codec.rest_request_to_input(parsed, message.input)
    spec = message.model_spec
    spec.name = request.model
    if request.version is not None:
        spec.version.value = request.version
    elif request.label:
        spec.version_label = request.label
    spec.signature_name = _rest_signature(document)
    return message, signature


def to_prediction_log(request: MirroredRequest, rate: Fraction, metadata: MetadataSource) -> apis.PredictionLog:
    """The ``PredictionLog`` of a kept request (its ``request`` only: the mirror never sees the answer).

    Raises ``status.ServingError`` or ValueError for a REST body TF Serving would refuse too.
    """
    if request.grpc_message is not None:
        message: Any = request.grpc_message
        if request.method == "multi_inference":
            signature = ",".join(task.model_spec.signature_name or DEFAULT_SIGNATURE for task in message.tasks)
        else:
            signature = message.model_spec.signature_name or DEFAULT_SIGNATURE
    else:
        message, signature = _rest_request(request, metadata)
    return prediction_log(cast(Method, request.method), message, model=request.model, origin=ORIGIN,
                          request_id=request.request_id, sampling_rate=float(rate), version=request.version,
                          label=request.label, signature=signature, when=request.time)


class RestMetadata:
    """TF Serving's metadata over REST (the SDK's RestClient), input dtypes cached per model and version or
    label for ``ttl`` seconds (a label moves during a rollout; a version's signatures never change)."""

    def __init__(self, rest_url: str, *, ttl: float = 60.0, timeout: float = 5.0, max_entries: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        from serving.client import NO_RETRY, RestClient

        self._client = RestClient(rest_url, timeout=timeout, retry=NO_RETRY)
        self._ttl, self._max = ttl, max_entries
        self._clock = clock
        self._cache: dict[tuple, tuple[float, dict[str, dict[str, object]]]] = {}
        self._lock = threading.Lock()
        self.fetches = 0

    def input_dtypes(self, model: str, version: int | None, label: str | None,
                     signature: str) -> dict[str, object]:
        key = (model, version, label)
        now = self._clock()
        with self._lock:
            hit = self._cache.get(key)
        if hit is None or (version is None and now - hit[0] > self._ttl):
            answer = self._client.metadata(model, version=version, label=label)
            self.fetches += 1
            hit = (now, {name: {i: spec.dtype for i, spec in sig.inputs.items()}
                         for name, sig in answer.signatures.items()})
            with self._lock:
                if len(self._cache) >= self._max:
                    self._cache.pop(next(iter(self._cache)))
                self._cache[key] = hit
        signatures = hit[1]
        if signature not in signatures:
            raise status.InvalidArgument(f"Serving signature name: \"{signature}\" not found in signature def")
        return signatures[signature]

    def close(self) -> None:
        self._client.close()


@dataclass
class SinkStats:
    """What the sink did, by count (``GET /stats``)."""

    received: int = 0          # every copy the gateway mirrored
    ignored: int = 0           # not an inference call, or a model not captured
    offered: int = 0           # inference calls of captured models: the sampler's n
    kept: int = 0              # floor(offered * rate)
    written: int = 0           # records the writer took
    dropped_budget: int = 0    # refused by a byte budget (file, total, day)
    dropped_queue: int = 0     # kept while the writer's queue was full
    unreadable: int = 0        # bodies that could not be decoded or converted
    by_model: dict[str, int] = field(default_factory=dict)   # written, per model

    def as_dict(self) -> dict:
        return {**{k: v for k, v in self.__dict__.items() if k != "by_model"}, "by_model": dict(self.by_model)}


class CaptureSink:
    """Decides which copies are kept (filter, sampler) on the caller's thread; converts and writes them
    on one writer thread, behind a queue bounded in bytes (full: dropped and counted, never waited on)."""

    def __init__(self, writer: LogWriter, metadata: MetadataSource, *, rate: Fraction,
                 models: frozenset[str] = frozenset(), queue_bytes: int = 64 << 20) -> None:
        self.writer, self.metadata = writer, metadata
        self.rate = rate
        self.sampler = SystematicSampler(float(rate))
        self.models = models
        self.stats = SinkStats()
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._queued_bytes, self._queue_bytes = 0, queue_bytes
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self._thread = threading.Thread(target=self._run, name="capture-writer", daemon=True)
        self._thread.start()

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self.stats, name, getattr(self.stats, name) + n)

    def offer(self, uri: str, headers: Mapping[str, str], body: bytes) -> None:
        """One mirrored copy: counted, sampled, and queued when kept. Never raises, never blocks."""
        self._count("received")
        if not self.models:   # no model filter: sample first, decode only the kept copies (1 in 10 at 10 %)
            if not is_inference(uri, headers):
                self._count("ignored")
                return
            self._count("offered")
            if not self.sampler.sample():
                return
        try:
            request = parse_mirrored(uri, headers, body)
        except (ValueError, OSError, EOFError, zlib.error) as exc:
            self._count("unreadable")
            log.warning("capture: unreadable mirrored request %s (%s): %s", uri[:200],
                        _header(headers, "x-request-id"), exc)
            return
        if self.models:
            if request is None or request.model not in self.models:
                self._count("ignored")
                return
            self._count("offered")
            if not self.sampler.sample():
                return
        elif request is None:   # an inference path, but not one the sink reads: counted as offered already
            self._count("unreadable")
            return
        self._count("kept")
        size = len(body)
        with self._lock:
            if self._queued_bytes + size > self._queue_bytes:
                self.stats.dropped_queue += 1
                return
            self._queued_bytes += size
            self._pending += 1
        self._queue.put((request, size))

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=1.0)
            except queue.Empty:
                self.writer.rotate_if_due()   # a file reaches its age with no traffic too
                continue
            if item is None:
                return
            request, size = item
            try:
                self._write(request)
            finally:
                with self._lock:
                    self._queued_bytes -= size
                    self._pending -= 1
                    if not self._pending:
                        self._idle.notify_all()

    def _write(self, request: MirroredRequest) -> None:
        try:
            record = to_prediction_log(request, self.rate, self.metadata)
        except Exception as exc:  # noqa: BLE001 - a body TF Serving refuses, its metadata unreachable: counted, logged, never raised
            self._count("unreadable")
            log.warning("capture: request %s of model %s not recorded: %s", request.request_id, request.model,
                        str(exc)[:300])
            return
        if self.writer.write(record):
            with self._lock:
                self.stats.written += 1
                self.stats.by_model[request.model] = self.stats.by_model.get(request.model, 0) + 1
        else:
            self._count("dropped_budget")

    def drain(self, timeout: float) -> bool:
        """Wait until every queued copy is written (True) or ``timeout`` passes (False)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self, timeout: float = 10.0) -> None:
        self.drain(timeout)
        self._queue.put(None)
        self._thread.join(timeout)
        self.writer.close()


# -- HTTP front: aiohttp, one event loop; a copy is answered 204 as soon as its body is read ---------------
def make_app(sink: CaptureSink):
    from aiohttp import web

    async def mirrored(request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        sink.offer(headers.get("x-capture-uri", request.path_qs), headers, body)
        return web.Response(status=204)

    async def stats(request: web.Request) -> web.Response:
        with sink._lock:
            doc = sink.stats.as_dict()
        doc["queued_bytes"] = sink._queued_bytes
        return web.json_response(doc)

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "capturing", "rate": str(sink.rate)})

    app = web.Application(client_max_size=1 << 30)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/stats", stats)
    app.router.add_route("*", "/{tail:.*}", mirrored)
    return app


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "0.0.0.0", int(port)


def _size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)[bB]?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"a size in bytes, or with k/m/g: {text!r}")
    return int(match[1]) << {"": 0, "k": 10, "m": 20, "g": 30}[match[2].lower()]


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="python -m serving.capture.gateway_sink", description=__doc__.split("\n")[0])
    parser.add_argument("--listen", default=env("CAPTURE_LISTEN", "0.0.0.0:8080"), help="HOST:PORT to serve the mirror on")
    parser.add_argument("--rest", default=env("CAPTURE_TF_SERVING_REST", "http://tfserving:8501"),
                        help="TF Serving's REST URL, for a model's signatures (REST Predict bodies)")
    parser.add_argument("--capture-dir", default=env("CAPTURE_DIR", "/var/lib/capture"))
    parser.add_argument("--rate", type=parse_rate, default=env("CAPTURE_RATE", "0.1"))
    parser.add_argument("--models", type=parse_models, default=env("CAPTURE_MODELS", ""),
                        help="models to capture (commas); empty or * = all")
    parser.add_argument("--max-file-bytes", type=_size, default=env("CAPTURE_MAX_FILE_BYTES", "64m"))
    parser.add_argument("--max-file-seconds", type=float, default=float(env("CAPTURE_MAX_FILE_SECONDS", "300")))
    parser.add_argument("--max-total-bytes", type=_size, default=env("CAPTURE_MAX_TOTAL_BYTES", "2g"))
    parser.add_argument("--max-day-bytes", type=_size, default=env("CAPTURE_MAX_DAY_BYTES", "1g"))
    parser.add_argument("--queue-bytes", type=_size, default=env("CAPTURE_QUEUE_BYTES", "64m"))
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = _arguments(argv)
    from aiohttp import web

    writer = CaptureWriter(args.capture_dir, origin=ORIGIN, max_file_bytes=args.max_file_bytes,
                           max_file_seconds=args.max_file_seconds, max_total_bytes=args.max_total_bytes,
                           max_day_bytes=args.max_day_bytes,
                           setting_names={"max_total_bytes": "CAPTURE_MAX_TOTAL_BYTES",
                                          "max_day_bytes": "CAPTURE_MAX_DAY_BYTES"})
    metadata = RestMetadata(args.rest)
    sink = CaptureSink(writer, metadata, rate=args.rate, models=args.models, queue_bytes=args.queue_bytes)
    host, port = _address(args.listen)
    log.info("capturing %s of %s into %s, listening on %s:%d", args.rate,
             ", ".join(sorted(args.models)) or "every model", args.capture_dir, host, port)

    async def serve() -> None:
        runner = web.AppRunner(make_app(sink), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port, backlog=1024).start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await runner.cleanup()

    try:
        asyncio.run(serve())
    finally:
        sink.close()
        metadata.close()
        with sink._lock:
            log.info("capture stopped: %s", sink.stats.as_dict())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
