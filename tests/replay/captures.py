"""Capture files for the replay tests, written with TensorFlow's own writer and TF Serving's official protos.

``tf.io.TFRecordWriter`` and ``tensorflow_serving.apis.prediction_log_pb2``
make the same bytes as the stack's capture writer (serving.capture), so a test
that replays these checks the readers against TF Serving's format, not
against our own writer. The two fields beyond the official ``LogMetadata``
(``request_id = 1001``, ``timestamp_micros = 1002``) are appended as raw
protobuf fields, as an official parser keeps them: unknown fields.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np

from serving.codec import ndarray_to_tensor_proto

__all__ = ["Captured", "write_capture", "capture_name", "T0"]

T0 = 1_765_008_000.0   # 2025-12-06T08:00:00Z: the first request of every test capture


@dataclass(frozen=True)
class Captured:
    """One request to capture: its inputs, when it came (unix seconds), and what it called."""

    inputs: Mapping[str, np.ndarray]
    time: float
    model: str = "digits"
    signature: str = "serving_default"
    method: str = "predict"
    version: Optional[int] = None
    request_id: str = ""
    outputs: Mapping[str, np.ndarray] = field(default_factory=dict)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _log_bytes(request: Captured, index: int) -> bytes:
    from tensorflow_serving.apis import classification_pb2, predict_pb2, prediction_log_pb2

    log = prediction_log_pb2.PredictionLog()
    if request.method == "predict":
        predict = predict_pb2.PredictRequest()
        predict.model_spec.name = request.model
        predict.model_spec.signature_name = request.signature
        if request.version is not None:
            predict.model_spec.version.value = request.version
        for name, value in request.inputs.items():
            ndarray_to_tensor_proto(np.asarray(value), predict.inputs[name])
        log.predict_log.request.CopyFrom(predict)
        for name, value in request.outputs.items():
            ndarray_to_tensor_proto(np.asarray(value), log.predict_log.response.outputs[name])
    else:
        log.classify_log.request.CopyFrom(classification_pb2.ClassificationRequest())
        log.classify_log.request.model_spec.name = request.model
    meta = log.log_metadata
    meta.model_spec.name = request.model
    meta.model_spec.signature_name = request.signature
    if request.version is not None:
        meta.model_spec.version.value = request.version
    meta.sampling_config.sampling_rate = 1.0
    meta.saved_model_tags.append("serve")
    meta.timestamp_secs = int(request.time)
    meta.request_origin = "embedded-server"
    request_id = (request.request_id or f"req-{index}").encode()
    extra = (_varint((1001 << 3) | 2) + _varint(len(request_id)) + request_id
             + _varint((1002 << 3) | 0) + _varint(int(round(request.time * 1e6))))
    meta.MergeFromString(meta.SerializeToString() + extra)   # kept as unknown fields, re-serialized with it
    return log.SerializeToString()


def capture_name(time: float, seq: int = 0, origin: str = "embedded-server") -> str:
    """The capture writer's file name: ``capture-<origin>-<UTC yyyymmddThhmmssZ>-<seq>.tfrecord``."""
    import datetime as dt

    stamp = dt.datetime.fromtimestamp(time, dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"capture-{origin}-{stamp}-{seq:06d}.tfrecord"


def write_capture(path: Path, requests: Sequence[Captured]) -> Path:
    """``requests`` as one capture file at ``path`` (a directory: a file named as the writer names it)."""
    import tensorflow as tf

    if path.is_dir():
        path = path / capture_name(requests[0].time if requests else T0)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for index, request in enumerate(requests):
            writer.write(_log_bytes(request, index))
    return path
