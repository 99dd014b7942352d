"""CaptureRecord: one PredictionLog read back, with its metadata as plain fields."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from serving.codec import DEFAULT_SIGNATURE, tensor_proto_to_ndarray
from serving.wire import apis

__all__ = ["LOG_FIELDS", "METHODS", "CaptureRecord", "Method", "prediction_log"]

Method = Literal["predict", "classify", "regress", "multi_inference"]
METHODS: tuple[Method, ...] = ("predict", "classify", "regress", "multi_inference")
# PredictionLog's oneof field of each method.
LOG_FIELDS: dict[str, Method] = {
    "predict_log": "predict",
    "classify_log": "classify",
    "regress_log": "regress",
    "multi_inference_log": "multi_inference",
}
_FIELD_OF: dict[str, str] = {method: field for field, method in LOG_FIELDS.items()}


@dataclass(frozen=True)
class CaptureRecord:
    """One captured request (and its response where the writer had it).

    ``log`` is the ``tensorflow.serving.PredictionLog`` message (serving.wire's
    declaration); the other fields are read from its ``log_metadata``.
    ``signature`` is the signature that served the request (``serving_default``
    where the request named none; for MultiInference, the tasks' signatures
    joined by commas). ``time`` is unix seconds (microsecond precision where
    the writer set ``timestamp_micros``).
    """

    model: str
    version: int | None
    label: str | None
    signature: str
    method: Method
    request_id: str
    time: float
    origin: str
    log: Any

    @classmethod
    def from_log(cls, log: Any) -> CaptureRecord:
        """The record of a parsed PredictionLog; ValueError if it holds none of the four methods."""
        field = log.WhichOneof("log_type")
        if field not in LOG_FIELDS:
            raise ValueError(f"PredictionLog holds {field or 'no log'}; capture files hold "
                             f"{', '.join(LOG_FIELDS)} only")
        meta = log.log_metadata
        spec = meta.model_spec
        method = LOG_FIELDS[field]
        return cls(
            model=spec.name,
            version=spec.version.value if spec.HasField("version") else None,
            label=spec.version_label or None,
            signature=spec.signature_name or _request_signature(getattr(log, field).request, method),
            method=method,
            request_id=meta.request_id,
            time=meta.timestamp_micros / 1e6 if meta.timestamp_micros else float(meta.timestamp_secs),
            origin=meta.request_origin,
            log=log,
        )

    @property
    def request(self) -> Any:
        """The request message (PredictRequest, ClassificationRequest, RegressionRequest, MultiInferenceRequest)."""
        return getattr(self.log, _FIELD_OF[self.method]).request

    @property
    def response(self) -> Any:
        """The response message, or None where the writer did not record one."""
        entry = getattr(self.log, _FIELD_OF[self.method])
        return entry.response if entry.HasField("response") else None

    def inputs(self) -> dict[str, np.ndarray]:
        """A Predict request's input tensors as numpy arrays (ValueError for the other methods)."""
        if self.method != "predict":
            raise ValueError(f"inputs() reads Predict records; this record is {self.method}")
        return {name: tensor_proto_to_ndarray(tensor) for name, tensor in self.request.inputs.items()}


def _request_signature(request: Any, method: Method) -> str:
    if method == "multi_inference":
        return ",".join(task.model_spec.signature_name or DEFAULT_SIGNATURE for task in request.tasks)
    return request.model_spec.signature_name or DEFAULT_SIGNATURE


def prediction_log(method: Method, request: Any, response: Any = None, *, model: str, origin: str,
                   request_id: str, sampling_rate: float, version: int | None = None,
                   label: str | None = None, signature: str = "", when: float | None = None) -> Any:
    """A PredictionLog of one request (official or wire message; its bytes are copied in).

    ``log_metadata`` gets ``model_spec`` (name, version or label, signature),
    ``sampling_config.sampling_rate``, ``saved_model_tags=["serve"]``,
    ``timestamp_secs``/``timestamp_micros`` (``when``, default now),
    ``request_origin`` and ``request_id``.
    """
    log = apis.PredictionLog()
    entry = getattr(log, _FIELD_OF[method])
    entry.request.ParseFromString(request.SerializeToString())
    if response is not None:
        entry.response.ParseFromString(response.SerializeToString())
    meta = log.log_metadata
    meta.model_spec.name = model
    if version is not None:
        meta.model_spec.version.value = version
    elif label:
        meta.model_spec.version_label = label
    meta.model_spec.signature_name = signature
    meta.sampling_config.sampling_rate = sampling_rate
    meta.saved_model_tags.append("serve")
    micros = int((time.time() if when is None else when) * 1_000_000)
    meta.timestamp_secs = micros // 1_000_000
    meta.timestamp_micros = micros
    meta.request_origin = origin
    meta.request_id = request_id
    return log
