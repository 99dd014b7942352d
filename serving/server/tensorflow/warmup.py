"""SavedModel warmup: replay ``assets.extra/tf_serving_warmup_requests`` at load time.

Mirrors ``servables/tensorflow/saved_model_warmup{,_util}.cc``: the file is a
TFRecord of ``tensorflow.serving.PredictionLog``; each record's request
(predict_log, classify_log, regress_log, multi_inference_log) runs
``num_request_iterations`` times through the servable's (possibly batching)
``run``. More than ``MAX_NUM_RECORDS`` records, an unparsable record, a
non-TFRecord file or a failing request fail the load; a missing file is fine.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Optional

from google.protobuf.message import DecodeError

from serving import status
from serving.codec import tensor_proto_to_ndarray
from serving.model_repo import WARMUP_REQUESTS_FILE, warmup_path
from serving.server.tensorflow import inference
from serving.server.tensorflow.servable import Servable

__all__ = ["WARMUP_REQUESTS_FILE", "MAX_NUM_RECORDS", "warmup_path", "run_saved_model_warmup"]

log = logging.getLogger(__name__)

MAX_NUM_RECORDS = 1000


def run_saved_model_warmup(servable: Servable, export_dir: str, *,
                           num_request_iterations: int = 1, metrics: Optional[Any] = None) -> int:
    """Replay the warmup file of ``export_dir`` on ``servable``; return the records read.

    Raises a ``status.ServingError`` when warmup fails (the load must fail).
    Reports ``metrics.record_warmup(export_dir, ok, latency_us, records)``
    when a file was found.
    """
    path = str(warmup_path(export_dir))
    if not os.path.exists(path):
        log.info("No warmup data file found at %s", path)
        return 0
    iterations = max(int(num_request_iterations), 1)
    log.info("Starting to read warmup data for model at %s with model-warmup-options "
             "num_request_iterations: %d", path, iterations)
    start = time.monotonic()
    records = 0
    error: Optional[status.ServingError] = None
    try:
        for record in _read_records(path):
            _run_record(servable, _parse_record(record, path), iterations)
            records += 1
            if records > MAX_NUM_RECORDS:
                raise status.InvalidArgument(
                    f"Number of warmup records exceeds the maximum ({MAX_NUM_RECORDS}) at {path}")
    except status.ServingError as exc:
        error = exc
    latency_us = (time.monotonic() - start) * 1e6
    if metrics is not None:
        metrics.record_warmup(export_dir, error is None, latency_us, records, error=error)
    if error is not None:
        raise error
    log.info("Finished reading warmup data for model at %s. Number of warmup records read: %d. "
             "Elapsed time (microseconds): %d.", path, records, latency_us)
    return records


def _read_records(path: str):
    import tensorflow as tf

    iterator = tf.compat.v1.io.tf_record_iterator(path)
    while True:
        try:
            yield next(iterator)
        except StopIteration:
            return
        except tf.errors.DataLossError as exc:
            raise status.DataLoss(
                f"{exc.message}. Please verify your warmup data is in TFRecord format.") from exc
        except tf.errors.OpError as exc:
            raise status.error_for(exc.error_code, exc.message) from exc


def _parse_record(record: bytes, path: str) -> Any:
    from tensorflow_serving.apis import prediction_log_pb2

    log_proto = prediction_log_pb2.PredictionLog()
    try:
        log_proto.ParseFromString(record)
    except DecodeError:
        raise status.InvalidArgument(
            f"Failed to parse warmup record: {record[:64]!r} from {path}") from None
    return log_proto


def _run_record(servable: Servable, log_proto: Any, iterations: int) -> None:
    kind = log_proto.WhichOneof("log_type")
    if kind in ("predict_streamed_log", "session_run_log"):
        number = log_proto.DESCRIPTOR.fields_by_name[kind].number
        raise status.Unimplemented(f"Unsupported log_type for warmup: {number}")
    if kind is None:
        return
    for _ in range(iterations):
        _RUNNERS[kind](servable, getattr(log_proto, kind).request)


def _predict(servable: Servable, request: Any) -> None:
    inputs = {alias: tensor_proto_to_ndarray(proto) for alias, proto in request.inputs.items()}
    inference.predict(servable, request.model_spec.signature_name, inputs,
                      list(request.output_filter))


def _classify(servable: Servable, request: Any) -> None:
    inference.classify(servable, request.model_spec.signature_name, request.input)


def _regress(servable: Servable, request: Any) -> None:
    inference.regress(servable, request.model_spec.signature_name, request.input)


def _multi_inference(servable: Servable, request: Any) -> None:
    for task in request.tasks:
        run = inference.classify if task.method_name.endswith("classify") else inference.regress
        run(servable, task.model_spec.signature_name, request.input)


_RUNNERS = {
    "predict_log": _predict,
    "classify_log": _classify,
    "regress_log": _regress,
    "multi_inference_log": _multi_inference,
}
