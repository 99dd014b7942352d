"""Fake TF Serving servers for client tests: real gRPC and HTTP servers on free ports.

There is no ``tensorflow_model_server`` binary here, so the servers are
stand-ins that speak TF Serving's protocols exactly: the gRPC one is the
official ``tensorflow_serving.apis`` servicers in a ``grpc.server`` (so every
request the SDK sends is parsed by the official messages, and every answer is
built with them and ``tf.make_tensor_proto``); the REST one is an aiohttp app
with TF Serving's routes, JSON bodies (``MessageToDict`` of the official
responses for metadata and status) and ``{"error": ...}`` bodies. For TLS
tests the gRPC server takes server credentials, and ``HttpsRestServer``
serves the same routes over HTTPS.

All serve one ``Backend``: a few tiny numpy "models", a queue of failures
to inject, so one server condition can be raised over both transports, and
the headers (gRPC metadata) each call carried.
"""
from __future__ import annotations

import asyncio
import collections
import http.server
import re
import ssl
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import grpc
import numpy as np
from aiohttp import web
from google.protobuf import json_format
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    input_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from serving import codec, status
from tests.support.ports import free_port

__all__ = ["Backend", "FakeGrpcServer", "FakeRestServer", "HttpsRestServer", "RestRoutes", "MODELS"]


@dataclass
class FakeSignature:
    method_name: str
    inputs: dict[str, tuple[np.dtype, tuple[int, ...]]]
    outputs: dict[str, tuple[np.dtype, tuple[int, ...]]]
    run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] = None


def _digits(inputs):
    images = inputs["images"].astype(np.float32)
    logits = images.reshape(len(images), -1)[:, :10] * 2.0
    return {"probabilities": logits / np.maximum(logits.sum(axis=1, keepdims=True), 1e-6),
            "logits": logits}


def _multi(inputs):
    ids, weights, text = inputs["ids"], inputs["weights"], inputs["text"]
    return {"score": weights.astype(np.float64).sum(axis=1) + ids, "ids_out": ids * 2,
            "echo_bytes": text, "flags": ids % 2 == 0, "narrow": (weights[:, 0] * 4).astype(np.int8),
            "nan_inf": np.array([np.nan, np.inf, -np.inf], np.float32)[: len(ids)]}


def _echo(inputs):
    return {"y": inputs["x"]}


def _half(inputs):
    return {"y": inputs["x"].astype(np.float16)}


F32, F16, F64, I64, I8, S, B = (np.dtype(t) for t in (np.float32, np.float16, np.float64, np.int64, np.int8, object,
                                                   np.bool_))
MODELS = {
    "digits": {
        "serving_default": FakeSignature("tensorflow/serving/predict", {"images": (F32, (-1, 8, 8, 1))},
                                         {"probabilities": (F32, (-1, 10)), "logits": (F32, (-1, 10))}, _digits),
    },
    "multi": {
        "serving_default": FakeSignature(
            "tensorflow/serving/predict",
            {"ids": (I64, (-1,)), "weights": (F32, (-1, 3)), "text": (S, (-1,))},
            {"score": (F64, (-1,)), "ids_out": (I64, (-1,)), "echo_bytes": (S, (-1,)), "flags": (B, (-1,)),
             "narrow": (I8, (-1,)), "nan_inf": (F32, (-1,))}, _multi),
    },
    "echo": {"serving_default": FakeSignature("tensorflow/serving/predict", {"x": (F32, (-1, -1))},
                                              {"y": (F32, (-1, -1))}, _echo)},
    # A float16 output: gRPC answers it; REST fails it as TF Serving does (json_tensor.cc writes no DT_HALF value).
    "half": {"serving_default": FakeSignature("tensorflow/serving/predict", {"x": (F32, (-1,))},
                                              {"y": (F16, (-1,))}, _half)},
    "text": {
        "classification": FakeSignature("tensorflow/serving/classify", {"inputs": (S, ())},
                                        {"classes": (S, (-1, 2)), "scores": (F32, (-1, 2))}),
        "regression": FakeSignature("tensorflow/serving/regress", {"inputs": (S, ())}, {"outputs": (F32, (-1,))}),
    },
}
VERSIONS = {"digits": [1, 2], "multi": [1], "echo": [1], "half": [1], "text": [3]}
LABELS = {"stable": 1}


@dataclass
class Backend:
    """The shared state of both fake servers."""

    failures: collections.deque = field(default_factory=collections.deque)
    calls: collections.Counter = field(default_factory=collections.Counter)
    delay: float = 0.0
    requests: list = field(default_factory=list)
    reload_configs: list = field(default_factory=list)
    headers: list = field(default_factory=list)  # per call: gRPC invocation metadata or HTTP headers, as a dict
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, code: status.Code, message: str, times: int = 1) -> None:
        """The next ``times`` calls fail with ``code`` and ``message``."""
        with self.lock:
            self.failures.extend([(status.Code(code), message)] * times)

    def enter(self, api: str) -> None:
        """Count a call; raise the next injected failure, if any."""
        with self.lock:
            self.calls[api] += 1
            failure = self.failures.popleft() if self.failures else None
        if failure:
            raise status.error_for(*failure)

    def resolve(self, name: str, version: Optional[int], label: Optional[str]) -> int:
        if name not in MODELS:
            raise status.NotFound(f"Servable not found for request: Latest({name})")
        if label is not None:
            if label not in LABELS:
                raise status.InvalidArgument(f"Unrecognized servable version label: {label}")
            return LABELS[label]
        if version is not None and version not in VERSIONS[name]:
            raise status.NotFound(f"Servable not found for request: Specific({name}, {version})")
        return version if version is not None else max(VERSIONS[name])

    def signature(self, name: str, signature: str) -> FakeSignature:
        key = signature or "serving_default"
        if key not in MODELS[name]:
            raise status.InvalidArgument(f'Serving signature name: "{key}" not found in signature def')
        return MODELS[name][key]

    def predict(self, name, version, label, signature, inputs, output_filter):
        self.enter("predict")
        self.resolve(name, version, label)
        sig = self.signature(name, signature)
        if set(inputs) != set(sig.inputs):
            raise status.InvalidArgument(
                f"input size does not match signature: {len(inputs)}!={len(sig.inputs)} "
                f"len({{{','.join(sorted(inputs))}}}) != len({{{','.join(sorted(sig.inputs))}}})")
        for key, (dtype, _) in sig.inputs.items():
            if inputs[key].dtype != dtype:
                raise status.InvalidArgument(f"Expects arg[0] to be {dtype} but {inputs[key].dtype} is provided")
        if self.delay:
            time.sleep(self.delay)
        outputs = sig.run(inputs)
        return {key: outputs[key] for key in (output_filter or outputs)}

    def classify(self, name, version, label, signature, examples):
        self.enter("classify")
        self.resolve(name, version, label)
        self.signature(name, signature or "classification")
        result = classification_pb2.ClassificationResult()
        for example in examples:
            text = codec.example_to_dict(example).get("text", [b""])[0]
            score = min(len(text) / 10.0, 1.0)
            item = result.classifications.add()
            item.classes.add(label="pos", score=score)
            item.classes.add(label="neg", score=1.0 - score)
        return result

    def regress(self, name, version, label, signature, examples):
        self.enter("regress")
        self.resolve(name, version, label)
        self.signature(name, signature or "regression")
        result = regression_pb2.RegressionResult()
        for example in examples:
            result.regressions.add(value=float(sum(codec.example_to_dict(example).get("x", []))))
        return result

    def metadata(self, name, version, label):
        self.enter("metadata")
        served = self.resolve(name, version, label)
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.name = name
        response.model_spec.version.value = served
        defs = get_model_metadata_pb2.SignatureDefMap()
        for key, sig in MODELS[name].items():
            target = defs.signature_def[key]
            target.method_name = sig.method_name
            for side, specs in (("inputs", sig.inputs), ("outputs", sig.outputs)):
                for tensor, (dtype, shape) in specs.items():
                    info = getattr(target, side)[tensor]
                    info.name = f"{key}_{tensor}:0"
                    info.dtype = codec.enum_from_dtype(dtype).enum
                    for size in shape:
                        info.tensor_shape.dim.add().size = size
        response.metadata["signature_def"].Pack(defs)
        return response

    def status(self, name, version, label):
        self.enter("status")
        response = get_model_status_pb2.GetModelStatusResponse()
        if name not in MODELS:
            raise status.NotFound(f"Could not find any versions of model {name}")
        versions = VERSIONS[name] if version is None and label is None else [self.resolve(name, version, label)]
        for number in versions:
            entry = response.model_version_status.add(version=number)
            entry.state = get_model_status_pb2.ModelVersionStatus.AVAILABLE
        if name == "digits" and version is None and label is None:
            entry = response.model_version_status.add(version=3)
            entry.state = get_model_status_pb2.ModelVersionStatus.END
            entry.status.error_code = status.Code.NOT_FOUND
            entry.status.error_message = "Failed to load"
        return response

    def reload(self, config):
        self.enter("reload")
        self.reload_configs.append(config)
        names = [model.name for model in config.model_config_list.config]
        if "bad" in names:
            raise status.FailedPrecondition("Model bad: version label 'x' refers to an unavailable version")


def _spec_of(model_spec):
    version = model_spec.version.value if model_spec.HasField("version") else None
    return model_spec.name, version, model_spec.version_label or None


def _examples(input_proto):
    kind = input_proto.WhichOneof("kind")
    return list(getattr(input_proto, kind).examples) if kind else []


class _Servicer(prediction_service_pb2_grpc.PredictionServiceServicer, model_service_pb2_grpc.ModelServiceServicer):
    """Official servicer base classes; errors become gRPC status like TF Serving's ToGRPCStatus."""

    def __init__(self, backend: Backend, tf: Any) -> None:
        self.backend, self.tf = backend, tf

    def _guard(self, context, fn):
        self.backend.headers.append(dict(context.invocation_metadata()))
        try:
            return fn()
        except status.ServingError as exc:
            context.abort(status.to_grpc_status(exc.code), status.truncate_for_grpc(exc.details))

    def Predict(self, request, context):
        def run():
            self.backend.requests.append(request)
            inputs = {key: self.tf.make_ndarray(value) for key, value in request.inputs.items()}
            outputs = self.backend.predict(*_spec_of(request.model_spec), request.model_spec.signature_name,
                                           inputs, list(request.output_filter))
            response = predict_pb2.PredictResponse()
            response.model_spec.CopyFrom(request.model_spec)
            for key, value in outputs.items():
                response.outputs[key].CopyFrom(self.tf.make_tensor_proto(value))
            return response
        return self._guard(context, run)

    def Classify(self, request, context):
        def run():
            self.backend.requests.append(request)
            result = self.backend.classify(*_spec_of(request.model_spec), request.model_spec.signature_name,
                                           _examples(request.input))
            return classification_pb2.ClassificationResponse(result=result, model_spec=request.model_spec)
        return self._guard(context, run)

    def Regress(self, request, context):
        def run():
            self.backend.requests.append(request)
            result = self.backend.regress(*_spec_of(request.model_spec), request.model_spec.signature_name,
                                          _examples(request.input))
            return regression_pb2.RegressionResponse(result=result, model_spec=request.model_spec)
        return self._guard(context, run)

    def GetModelMetadata(self, request, context):
        def run():
            if list(request.metadata_field) != ["signature_def"]:
                raise status.InvalidArgument("Metadata field not supported")
            return self.backend.metadata(*_spec_of(request.model_spec))
        return self._guard(context, run)

    def GetModelStatus(self, request, context):
        return self._guard(context, lambda: self.backend.status(*_spec_of(request.model_spec)))

    def HandleReloadConfigRequest(self, request, context):
        def run():
            self.backend.reload(request.config)
            return model_management_pb2.ReloadConfigResponse()
        return self._guard(context, run)


class FakeGrpcServer:
    """A ``grpc.server`` with the official servicers on a free loopback port (TLS with ``credentials``)."""

    def __init__(self, backend: Backend, tf: Any, credentials: Optional[grpc.ServerCredentials] = None) -> None:
        self.port = free_port()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8),
                                  options=[("grpc.max_receive_message_length", -1),
                                           ("grpc.max_send_message_length", -1)])
        servicer = _Servicer(backend, tf)
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(servicer, self.server)
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(servicer, self.server)
        if credentials is None:
            self.server.add_insecure_port(f"127.0.0.1:{self.port}")
        else:
            self.server.add_secure_port(f"127.0.0.1:{self.port}", credentials)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "FakeGrpcServer":
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop(grace=None).wait()


# TF Serving's REST routes (http_rest_api_handler.cc).
_POST = re.compile(r"(?i)/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)")
_GET = re.compile(r"(?i)/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:/(metadata))?")


class FakeRestServer:
    """An aiohttp app on a free port, answering like TF Serving's REST API.

    Errors are what TF Serving sends: the code's HTTP status and ``{"error": message}``.
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._routes = RestRoutes(backend)
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: Optional[web.AppRunner] = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FakeRestServer":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    async def _start(self) -> None:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()

    async def _handle(self, request: web.Request) -> web.Response:
        self.backend.headers.append({name.lower(): value for name, value in request.headers.items()})
        body = await request.read()
        try:
            payload = await asyncio.get_running_loop().run_in_executor(
                None, self._routes.answer, request.method, request.path, body)
            return web.Response(body=payload, content_type="application/json")
        except status.ServingError as exc:
            return web.Response(status=status.to_http_status(exc.code),
                                body=codec.json_dumps({"error": exc.details}), content_type="application/json")


class RestRoutes:
    """TF Serving's REST routes over a ``Backend``: ``answer(method, path, body)`` or a ``ServingError``."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def answer(self, method: str, path: str, body: bytes) -> bytes:
        post, get = _POST.fullmatch(path), _GET.fullmatch(path)
        if method == "POST" and post:
            name, version, label, verb = post.groups()
            return self._post(name, int(version) if version else None, label, verb, body)
        if method == "GET" and get and get.group(1):
            name, version, label, meta = get.groups()
            version = int(version) if version else None
            message = (self.backend.metadata(name, version, label) if meta
                       else self.backend.status(name, version, label))
            return codec.json_dumps(json_format.MessageToDict(message, preserving_proto_field_name=True))
        raise status.InvalidArgument(f"Malformed request: {method} {path}")

    def _post(self, name, version, label, verb, body) -> bytes:
        doc = codec.json_loads(body)
        signature = doc.get("signature_name", "") if isinstance(doc, dict) else ""
        if verb == "predict":
            self.backend.resolve(name, version, label)
            sig = self.backend.signature(name, signature)
            inputs, row = codec.rest_request_to_inputs(doc, {k: d for k, (d, _) in sig.inputs.items()})
            return codec.outputs_to_rest_response(
                self.backend.predict(name, version, label, signature, inputs, None), row)
        request_input = codec.rest_request_to_input(doc, input_pb2.Input())
        if verb == "classify":
            return codec.classification_result_to_rest(
                self.backend.classify(name, version, label, signature, _examples(request_input)))
        return codec.regression_result_to_rest(
            self.backend.regress(name, version, label, signature, _examples(request_input)))


class HttpsRestServer:
    """TF Serving's REST routes over HTTPS from ``http.server`` on a free loopback port.

    OpenSSL runs the handshake as each connection is accepted, so a refused
    client certificate reaches the client as a TLS alert, as from nginx or
    Envoy (asyncio servers such as aiohttp drop the connection without one).
    """

    def __init__(self, backend: Backend, ssl_context: ssl.SSLContext) -> None:
        routes = RestRoutes(backend)

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                backend.headers.append({name.lower(): value for name, value in self.headers.items()})
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    code, payload = 200, routes.answer(self.command, self.path, body)
                except status.ServingError as exc:
                    code, payload = status.to_http_status(exc.code), codec.json_dumps({"error": exc.details})
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.socket = ssl_context.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> "HttpsRestServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(30)
