"""SavedModel warmup: replay ``assets.extra/tf_serving_warmup_requests`` at load time.

Mirrors ``servables/tensorflow/saved_model_warmup{,_util}.cc``: the file is a
TFRecord of ``tensorflow.serving.PredictionLog``; each record's request
(predict_log, classify_log, regress_log, multi_inference_log) runs
``num_request_iterations`` times through the servable's (possibly batching)
``run``. More than ``MAX_NUM_RECORDS`` records, an unparsable record, a
non-TFRecord file or a failing request fail the load; a missing file is fine.

Once the records ran, the servable's memory per row is measured (the
embedded server's own step, ``serving.server.admission``): for each
signature, the records with the fewest and the most rows run once more under
``memory.peak_rss_during`` (already warm, so one-time costs stay out;
without the run wrapper, so it is the model's memory), and
the line through the two peaks becomes ``servable.memory_profile``. That is at
most two more runs per signature; a multi-inference record is not measured.
"""
from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Callable, Optional, Protocol, Union, cast

from google.protobuf.message import DecodeError

from serving import status
from serving.codec import tensor_proto_to_ndarray
from serving.model_repo import WARMUP_REQUESTS_FILE, warmup_path
from serving.server.admission import LineFit, MemoryProfile, examples_cost
from serving.server.memory import peak_rss_during
from serving.server.tensorflow import inference
from serving.server.tensorflow.servable import Servable

if TYPE_CHECKING:  # these messages load TensorFlow; they only annotate
    from tensorflow_serving.apis.classification_pb2 import ClassificationRequest
    from tensorflow_serving.apis.inference_pb2 import MultiInferenceRequest
    from tensorflow_serving.apis.predict_pb2 import PredictRequest
    from tensorflow_serving.apis.prediction_log_pb2 import PredictionLog
    from tensorflow_serving.apis.regression_pb2 import RegressionRequest

__all__ = ["WARMUP_REQUESTS_FILE", "MAX_NUM_RECORDS", "WarmupMetrics", "warmup_path", "run_saved_model_warmup"]

log = logging.getLogger(__name__)

MAX_NUM_RECORDS = 1000


class WarmupMetrics(Protocol):
    """What warmup records (``serving.server.metrics.ServerMetrics`` provides it); thread-safe."""

    def record_warmup(self, model_path: str, ok: bool, latency_us: float, records: int,
                      error: Optional[Union[BaseException, str]] = None) -> None: ...


def run_saved_model_warmup(servable: Servable, export_dir: str, *,
                           num_request_iterations: int = 1,
                           metrics: Optional[WarmupMetrics] = None) -> int:
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
    extremes: dict[str, dict[int, Callable[[], None]]] = {}
    try:
        for record in _read_records(path):
            log_proto = _parse_record(record, path)
            _run_record(servable, log_proto, iterations)
            _keep_extremes(extremes, servable, log_proto)
            records += 1
            if records > MAX_NUM_RECORDS:
                raise status.InvalidArgument(
                    f"Number of warmup records exceeds the maximum ({MAX_NUM_RECORDS}) at {path}")
    except status.ServingError as exc:
        error = exc
    if error is None and extremes:
        try:
            servable.memory_profile = _measure(extremes)
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


def _parse_record(record: bytes, path: str) -> PredictionLog:
    from tensorflow_serving.apis import prediction_log_pb2

    log_proto = prediction_log_pb2.PredictionLog()
    try:
        log_proto.ParseFromString(record)
    except DecodeError:
        raise status.InvalidArgument(
            f"Failed to parse warmup record: {record[:64]!r} from {path}") from None
    return log_proto


def _run_record(servable: Servable, log_proto: PredictionLog, iterations: int) -> None:
    kind = log_proto.WhichOneof("log_type")
    if kind in ("predict_streamed_log", "session_run_log"):
        number = log_proto.DESCRIPTOR.fields_by_name[kind].number
        raise status.Unimplemented(f"Unsupported log_type for warmup: {number}")
    if kind is None:
        return
    for _ in range(iterations):
        _RUNNERS[kind](servable, getattr(log_proto, kind).request)


def _record_rows(log_proto: PredictionLog) -> Optional[tuple[str, int]]:
    """The signature key and rows (batch dimension, or tf.Examples) of a predict/classify/regress record."""
    kind = log_proto.WhichOneof("log_type")
    if kind not in ("predict_log", "classify_log", "regress_log"):
        return None
    request = getattr(log_proto, kind).request
    key = request.model_spec.signature_name or inference.DEFAULT_SIGNATURE
    if kind != "predict_log":
        return key, examples_cost(None, key, request.input).rows
    dims = [t.tensor_shape.dim for t in request.inputs.values()]
    return key, max((int(d[0].size) if d else 1 for d in dims), default=0)


def _keep_extremes(extremes: dict[str, dict[int, Callable[[], None]]], servable: Servable,
                   log_proto: PredictionLog) -> None:
    """Keep, per signature, a replay of the record with the fewest and with the most rows."""
    found = _record_rows(log_proto)
    if found is None:
        return
    key, rows = found
    kind = log_proto.WhichOneof("log_type")
    seen = extremes.setdefault(key, {})
    unwrapped = cast(Servable, _Unwrapped(servable))   # has every attribute inference reads
    replay = lambda: _RUNNERS[kind](unwrapped, getattr(log_proto, kind).request)  # noqa: E731
    if not seen or rows < min(seen):
        seen[rows] = replay
    if rows > max(seen):
        seen[rows] = replay
    for extra in sorted(seen)[1:-1]:
        del seen[extra]


class _Unwrapped:
    """The servable as ``inference`` sees it, running without the run wrapper: a measurement replay is the
    model's own memory, not a batching queue's, and adds no call to the wrapper."""

    def __init__(self, servable: Servable) -> None:
        self.signatures, self.signature_defs = servable.signatures, servable.signature_defs
        self.run = servable.run_direct


def _measure(extremes: dict[str, dict[int, Callable[[], None]]]) -> Optional[MemoryProfile]:
    """Each kept record once more, its peak RSS rise measured; None where ``/proc`` cannot say."""
    fits: dict[str, LineFit] = {}
    for key, replays in extremes.items():
        points = []
        for rows, replay in sorted(replays.items()):
            _, peak = peak_rss_during(replay)
            if peak is None:
                return None
            points.append((rows, peak))
        fits[key] = LineFit.through(points)
        log.info("Memory of signature %s measured at warmup: %d bytes + %d bytes per row (rows %s)",
                 key, fits[key].fixed_bytes, fits[key].bytes_per_row, list(fits[key].measured_rows))
    return MemoryProfile(fits)


def _predict(servable: Servable, request: PredictRequest) -> None:
    inputs = {alias: tensor_proto_to_ndarray(proto) for alias, proto in request.inputs.items()}
    inference.predict(servable, request.model_spec.signature_name, inputs,
                      list(request.output_filter))


def _classify(servable: Servable, request: ClassificationRequest) -> None:
    inference.classify(servable, request.model_spec.signature_name, request.input)


def _regress(servable: Servable, request: RegressionRequest) -> None:
    inference.regress(servable, request.model_spec.signature_name, request.input)


def _multi_inference(servable: Servable, request: MultiInferenceRequest) -> None:
    for task in request.tasks:
        run = inference.classify if task.method_name.endswith("classify") else inference.regress
        run(servable, task.model_spec.signature_name, request.input)


_RUNNERS = {
    "predict_log": _predict,
    "classify_log": _classify,
    "regress_log": _regress,
    "multi_inference_log": _multi_inference,
}
