"""Request capture: sampled traffic in TF Serving's own PredictionLog format.

Capture files are TFRecord files (TensorFlow's framing, byte for byte), each
record a serialized ``tensorflow.serving.PredictionLog`` holding a request,
its response where the writer had it, and ``log_metadata`` (model, version or
label, signature, time, request id, origin). Warmup, canary analysis, load
tests and shadow canaries replay them; ``tf.data.TFRecordDataset`` and TF
Serving's own ``prediction_log_pb2`` read them too.

- reading: ``read_capture`` (records of a file, a directory or a list,
  filtered by time, model, method), ``CaptureRecord``, ``is_capture``,
  ``capture_files``; a broken file is a ``CaptureError`` naming file and offset;
- writing: ``CaptureWriter`` (size- and age-rotated files, a byte budget for
  the directory and per UTC day, thread-safe, never raises into its caller),
  ``prediction_log`` builds the record of one request, ``SystematicSampler``
  keeps exactly ``rate`` of the requests it is shown;
- ``python -m serving.capture ls|filter|sample|to-npz|to-rest``.

Nothing here imports TensorFlow.
"""
from __future__ import annotations

from serving.capture._errors import CaptureError
from serving.capture._reader import capture_files, is_capture, read_capture
from serving.capture._records import METHODS, CaptureRecord, prediction_log
from serving.capture._sampling import SystematicSampler
from serving.capture._writer import CaptureStats, CaptureWriter

__all__ = [
    "METHODS",
    "CaptureError",
    "CaptureRecord",
    "CaptureStats",
    "CaptureWriter",
    "SystematicSampler",
    "capture_files",
    "is_capture",
    "prediction_log",
    "read_capture",
]
