"""The client side of the contract suite: one small interface, four implementations.

``StubGrpcClient`` uses the official ``tensorflow-serving-api`` stubs and
``JsonRestClient`` speaks TF Serving's documented REST JSON with plain httpx
(no project code on the wire path), so they check the server independently of
the SDK. ``SdkGrpcClient`` / ``SdkRestClient`` adapt ``serving.client``.

Every client returns the same values (numpy arrays, lists, and
``serving.codec``'s ``ModelMetadata`` and ``VersionStatus``) and raises
``serving.status`` errors carrying the server's code and message, so one test
body runs against all four.
"""
from __future__ import annotations

import base64
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from serving import client as sdk
from serving import status
from serving.codec import ModelMetadata, VersionStatus

__all__ = ["CLIENT_KINDS", "make_client"]

CLIENT_KINDS = ("stub-grpc", "json-rest", "sdk-grpc", "sdk-rest")
GRPC_MAX = 2**31 - 1


def make_client(kind: str, grpc_target: str, rest_url: str) -> Any:
    """The client named ``kind`` (one of ``CLIENT_KINDS``)."""
    if kind == "stub-grpc":
        return StubGrpcClient(grpc_target)
    if kind == "json-rest":
        return JsonRestClient(rest_url)
    if kind == "sdk-grpc":
        return SdkClient(sdk.GrpcClient(grpc_target), kind)
    return SdkClient(sdk.RestClient(rest_url), kind)


def _examples_to_protos(examples: Sequence[Mapping[str, Any]]) -> list:
    from tensorflow.core.example import example_pb2

    protos = []
    for features in examples:
        example = example_pb2.Example()
        for key, given in features.items():
            values = given if isinstance(given, (list, tuple)) else [given]
            feature = example.features.feature[key]
            if all(isinstance(v, (bytes, str)) for v in values):
                feature.bytes_list.value.extend(v.encode() if isinstance(v, str) else v for v in values)
            elif all(isinstance(v, (int, np.integer)) for v in values):
                feature.int64_list.value.extend(int(v) for v in values)
            else:
                feature.float_list.value.extend(float(v) for v in values)
        protos.append(example)
    return protos


class StubGrpcClient:
    """The official stubs, as a TF Serving user would call them."""

    transport = "grpc"

    def __init__(self, target: str) -> None:
        import grpc
        from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

        self._grpc = grpc
        self.channel = grpc.insecure_channel(target, options=[
            ("grpc.max_send_message_length", GRPC_MAX), ("grpc.max_receive_message_length", GRPC_MAX)])
        self.predictions = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        self.models = model_service_pb2_grpc.ModelServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def _call(self, method: Any, request: Any, timeout: float) -> Any:
        try:
            return method(request, timeout=timeout)
        except self._grpc.RpcError as exc:
            raise status.error_for(status.from_grpc_status(exc.code()), exc.details() or "") from exc

    @staticmethod
    def _spec(model_spec: Any, model: str, version: Optional[int], label: Optional[str],
              signature: Optional[str] = None) -> None:
        model_spec.name = model
        if version is not None:
            model_spec.version.value = version
        if label is not None:
            model_spec.version_label = label
        if signature:
            model_spec.signature_name = signature

    def predict(self, model: str, inputs: Mapping[str, np.ndarray], *, version: Optional[int] = None,
                label: Optional[str] = None, signature: Optional[str] = None,
                output_filter: Sequence[str] = (), timeout: float = 60.0) -> dict[str, np.ndarray]:
        import tensorflow as tf
        from tensorflow_serving.apis import predict_pb2

        request = predict_pb2.PredictRequest()
        self._spec(request.model_spec, model, version, label, signature)
        for key, value in inputs.items():
            request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
        request.output_filter.extend(output_filter)
        response = self._call(self.predictions.Predict, request, timeout)
        self.last_model_spec = response.model_spec
        return {key: tf.make_ndarray(proto) for key, proto in response.outputs.items()}

    def _input(self, request: Any, examples: Sequence[Mapping[str, Any]]) -> None:
        request.input.example_list.examples.extend(_examples_to_protos(examples))

    def classify(self, model: str, examples: Sequence[Mapping[str, Any]], *, signature: Optional[str] = None,
                 version: Optional[int] = None, label: Optional[str] = None,
                 timeout: float = 60.0) -> list[list[tuple[str, float]]]:
        from tensorflow_serving.apis import classification_pb2

        request = classification_pb2.ClassificationRequest()
        self._spec(request.model_spec, model, version, label, signature)
        self._input(request, examples)
        response = self._call(self.predictions.Classify, request, timeout)
        return [[(c.label, c.score) for c in item.classes] for item in response.result.classifications]

    def regress(self, model: str, examples: Sequence[Mapping[str, Any]], *, signature: Optional[str] = None,
                version: Optional[int] = None, label: Optional[str] = None, timeout: float = 60.0) -> list[float]:
        from tensorflow_serving.apis import regression_pb2

        request = regression_pb2.RegressionRequest()
        self._spec(request.model_spec, model, version, label, signature)
        self._input(request, examples)
        response = self._call(self.predictions.Regress, request, timeout)
        return [r.value for r in response.result.regressions]

    def metadata(self, model: str, *, version: Optional[int] = None, label: Optional[str] = None) -> ModelMetadata:
        from tensorflow_serving.apis import get_model_metadata_pb2

        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        self._spec(request.model_spec, model, version, label)
        response = self._call(self.predictions.GetModelMetadata, request, 60.0)
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signature_map)
        return ModelMetadata.from_signature_defs(response.model_spec.name, response.model_spec.version.value,
                                                 signature_map.signature_def)

    def status(self, model: str, *, version: Optional[int] = None) -> list[VersionStatus]:
        from tensorflow_serving.apis import get_model_status_pb2

        request = get_model_status_pb2.GetModelStatusRequest()
        self._spec(request.model_spec, model, version, None)
        response = self._call(self.models.GetModelStatus, request, 60.0)
        return [VersionStatus(v.version, v.state, status.Code(v.status.error_code), v.status.error_message)
                for v in response.model_version_status]


class JsonRestClient:
    """TF Serving's REST API as documented (api_rest.md), with httpx and json only."""

    transport = "rest"

    def __init__(self, base_url: str) -> None:
        import httpx

        self._http = httpx.Client(base_url=base_url, timeout=60.0)

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, body: Any = None) -> Any:
        response = self._http.request(method, path, json=body)
        document = response.json()
        if response.status_code != 200:
            raise status.error_for(status.from_http_status(response.status_code), document["error"])
        return document

    @staticmethod
    def _path(model: str, version: Optional[int], label: Optional[str]) -> str:
        path = f"/v1/models/{model}"
        if version is not None:
            path += f"/versions/{version}"
        elif label is not None:
            path += f"/labels/{label}"
        return path

    @staticmethod
    def _json_value(value: np.ndarray) -> Any:
        if value.dtype == object or value.dtype.kind in "SU":
            return np.vectorize(lambda v: v.decode() if isinstance(v, bytes) else v, otypes=[object])(value).tolist()
        return value.tolist()

    def predict(self, model: str, inputs: Mapping[str, np.ndarray], *, version: Optional[int] = None,
                label: Optional[str] = None, signature: Optional[str] = None,
                output_filter: Sequence[str] = (), timeout: float = 60.0) -> dict[str, np.ndarray]:
        body: dict[str, Any] = {"inputs": {k: self._json_value(np.asarray(v)) for k, v in inputs.items()}}
        if signature:
            body["signature_name"] = signature
        path = self._path(model, version, label)
        outputs = self.request("POST", path + ":predict", body)["outputs"]
        if not isinstance(outputs, dict):   # one output: TF Serving omits its name
            signature_def = self.request("GET", path + "/metadata")["metadata"]["signature_def"]["signature_def"]
            (name,) = signature_def[signature or "serving_default"]["outputs"]
            outputs = {name: outputs}
        return {k: np.asarray(v) for k, v in outputs.items()}

    def _examples(self, examples: Sequence[Mapping[str, Any]]) -> list:
        return [{k: (v.decode() if isinstance(v, bytes) else v) for k, v in e.items()} for e in examples]

    def classify(self, model: str, examples: Sequence[Mapping[str, Any]], *, signature: Optional[str] = None,
                 version: Optional[int] = None, label: Optional[str] = None,
                 timeout: float = 60.0) -> list[list[tuple[str, float]]]:
        body = {"signature_name": signature or "", "examples": self._examples(examples)}
        results = self.request("POST", self._path(model, version, label) + ":classify", body)["results"]
        return [[(str(lbl), float(score)) for lbl, score in item] for item in results]

    def regress(self, model: str, examples: Sequence[Mapping[str, Any]], *, signature: Optional[str] = None,
                version: Optional[int] = None, label: Optional[str] = None, timeout: float = 60.0) -> list[float]:
        body = {"signature_name": signature or "", "examples": self._examples(examples)}
        return [float(v) for v in self.request("POST", self._path(model, version, label) + ":regress", body)["results"]]

    def metadata(self, model: str, *, version: Optional[int] = None, label: Optional[str] = None) -> ModelMetadata:
        from google.protobuf import json_format
        from tensorflow.core.protobuf import meta_graph_pb2

        document = self.request("GET", self._path(model, version, label) + "/metadata")
        signatures = document["metadata"]["signature_def"]["signature_def"]
        return ModelMetadata.from_signature_defs(
            document["model_spec"]["name"], int(document["model_spec"]["version"]),
            {key: json_format.ParseDict(sig, meta_graph_pb2.SignatureDef()) for key, sig in signatures.items()})

    def status(self, model: str, *, version: Optional[int] = None) -> list[VersionStatus]:
        document = self.request("GET", self._path(model, version, None))
        return [VersionStatus(int(v["version"]), v["state"], status.Code[v["status"]["error_code"]],
                              v["status"].get("error_message", ""))
                for v in document["model_version_status"]]


class SdkClient:
    """``serving.client.GrpcClient`` / ``RestClient`` behind the contract interface."""

    def __init__(self, client: Any, kind: str) -> None:
        self._client = client
        self.transport = "grpc" if kind == "sdk-grpc" else "rest"

    def close(self) -> None:
        close = getattr(self._client, "close", None)
        if close:
            close()

    def predict(self, model: str, inputs: Mapping[str, np.ndarray], **kwargs: Any) -> dict[str, np.ndarray]:
        output_filter = kwargs.pop("output_filter", ()) or None
        return dict(self._client.predict(model, dict(inputs), output_filter=output_filter, **kwargs))

    def classify(self, model: str, examples: Sequence[Mapping[str, Any]], **kwargs: Any) -> list:
        result = self._client.classify(model, list(examples), **kwargs)
        return [[(_text(lbl), float(score)) for lbl, score in item] for item in result]

    def regress(self, model: str, examples: Sequence[Mapping[str, Any]], **kwargs: Any) -> list[float]:
        return [float(v) for v in self._client.regress(model, list(examples), **kwargs)]

    def metadata(self, model: str, **kwargs: Any) -> ModelMetadata:
        return self._client.metadata(model, **kwargs)

    def status(self, model: str, **kwargs: Any) -> list[VersionStatus]:
        return self._client.status(model, **kwargs)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def b64(data: bytes) -> dict:
    """TF Serving's JSON form of binary data."""
    return {"b64": base64.b64encode(data).decode()}
