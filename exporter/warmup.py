"""TF Serving warmup data: ``assets.extra/tf_serving_warmup_requests``.

A TFRecord file of ``tensorflow.serving.PredictionLog`` records (the official
protos), one Predict request per signature and allowed batch size, so the
first real request of each batch size finds its kernels (and XLA clusters or
TensorRT engines) ready. TF Serving refuses a file with more than 1000
records (``kMaxNumRecords``). Batch sizes come from the project's batching
config (``allowed_batch_sizes``), else :data:`DEFAULT_BATCH_SIZES`. The
file's place in a version directory is ``serving.model_repo.warmup_path``.

A batch of size N is the first N rows of the signature's warmup rows,
cycled when there are fewer: the goldens, or, from a request capture, the
rows of consecutive captured requests concatenated (``exporter.samples``).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from serving.checkout import REPO_ROOT
from serving.codec import ndarray_to_tensor_proto
from serving.config import load_batching_parameters
from serving.model_repo import warmup_path

__all__ = [
    "MAX_RECORDS",
    "MAX_WARMUP_BYTES",
    "DEFAULT_BATCH_SIZES",
    "DEFAULT_BATCHING_CONFIG",
    "allowed_batch_sizes",
    "build_requests",
    "write_warmup",
    "read_warmup",
    "warmup_path",  # re-exported from serving.model_repo, where the file's place is defined
]

log = logging.getLogger(__name__)

MAX_RECORDS = 1000
# Cap on the tensor bytes of the whole file; resnet50 at 1..32 needs ~38 MB.
MAX_WARMUP_BYTES = 64 * 1024 * 1024
DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
DEFAULT_BATCHING_CONFIG = REPO_ROOT / "serving" / "batching.config"


def allowed_batch_sizes(batching_config: Optional[Union[str, Path]] = None) -> tuple[int, ...]:
    """``allowed_batch_sizes`` of the batching config, else :data:`DEFAULT_BATCH_SIZES`.

    ``batching_config`` defaults to the project's ``serving/batching.config``.
    A missing file, or one without ``allowed_batch_sizes``, gives the default;
    a file that does not parse raises ValueError (a broken config is a bug).
    """
    path = Path(batching_config) if batching_config is not None else DEFAULT_BATCHING_CONFIG
    if not path.is_file():
        log.info("no batching config at %s; warming up batch sizes %s", path, DEFAULT_BATCH_SIZES)
        return DEFAULT_BATCH_SIZES
    sizes = tuple(int(s) for s in load_batching_parameters(path).allowed_batch_sizes)
    return tuple(sorted(set(sizes))) if sizes else DEFAULT_BATCH_SIZES


def _tile_rows(inputs: Mapping[str, np.ndarray], batch_size: int) -> dict[str, np.ndarray]:
    rows = np.arange(batch_size) % len(next(iter(inputs.values())))
    return {k: np.asarray(v)[rows] for k, v in inputs.items()}


def _nbytes(inputs: Mapping[str, np.ndarray]) -> int:
    return sum(sum(len(x) for x in v.reshape(-1)) if v.dtype == object else v.nbytes
               for v in inputs.values())


def build_requests(model_name: str, inputs_by_signature: Mapping[str, Mapping[str, np.ndarray]],
                   batch_sizes: Sequence[int], *, max_bytes: int = MAX_WARMUP_BYTES) -> list:
    """PredictionLog records: every signature at every batch size, smallest sizes first.

    Rows are the signature's real inputs (its first ``batch_size`` rows), cycled to the batch size. Sizes
    that would push the file past ``max_bytes`` or :data:`MAX_RECORDS` are
    left out (largest first) and logged.
    """
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2  # tensorflow_serving: only when exporting

    logs: list = []   # PredictionLog messages (tensorflow_serving's, imported above)
    total = 0
    for batch_size in sorted(batch_sizes):
        for signature, inputs in inputs_by_signature.items():
            batch = _tile_rows(inputs, batch_size)
            if total + _nbytes(batch) > max_bytes or len(logs) >= MAX_RECORDS:
                log.warning("warmup for %s stops before batch size %d (limits: %d bytes, %d records)",
                            model_name, batch_size, max_bytes, MAX_RECORDS)
                return logs
            request = predict_pb2.PredictRequest()
            request.model_spec.name = model_name
            request.model_spec.signature_name = signature
            for key, value in batch.items():
                ndarray_to_tensor_proto(value, request.inputs[key])
            logs.append(prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)))
            total += _nbytes(batch)
    return logs


def write_warmup(version_dir: Union[str, Path], logs: Sequence) -> Path:
    """Write ``logs`` as TF Serving's warmup TFRecord file; return its path."""
    import tensorflow as tf  # TensorFlow: only when exporting

    if len(logs) > MAX_RECORDS:
        raise ValueError(f"{len(logs)} warmup records; TF Serving accepts at most {MAX_RECORDS}")
    path = warmup_path(version_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in logs:
            writer.write(record.SerializeToString())
    return path


def read_warmup(version_dir: Union[str, Path]) -> list:
    """Parse the warmup file of ``version_dir`` into PredictionLog protos."""
    import tensorflow as tf  # TensorFlow: only when reading a warmup file
    from tensorflow_serving.apis import prediction_log_pb2  # tensorflow_serving: likewise

    logs = []
    for raw in tf.data.TFRecordDataset(str(warmup_path(version_dir))):
        record = prediction_log_pb2.PredictionLog()
        record.ParseFromString(raw.numpy())
        logs.append(record)
    return logs
