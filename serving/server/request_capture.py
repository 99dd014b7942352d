"""Request capture in the embedded server: TF Serving's request logger role, without blocking a request.

TF Serving's ``ServerRequestLogger`` logs sampled requests as ``PredictionLog``
records; its open-source binary has no logger to write them. Here the data
plane (``frontends.dataplane``) offers every successful Predict, Classify,
Regress and MultiInference, whichever front-end decoded it, to
``ServerRequestCapture``:

- ``offer(model)`` says, cheaply, whether to capture this request: never for a
  model in ``exclude_models`` (counted ``excluded``), else a
  ``SystematicSampler`` per model keeps exactly ``sample_rate`` of them;
- ``submit(call)`` puts the call (references to the request's decoded inputs or
  examples and to the answer, nothing copied) on a queue bounded in records and
  in bytes, without waiting: a full queue drops the record (counted
  ``dropped_queue_full``);
- one writer thread builds each ``PredictionLog`` (the request as the data
  plane decoded it, so a REST and a gRPC request of the same rows give the
  same record, and the response) and appends it with ``serving.capture.CaptureWriter``,
  whose byte budgets stop capture, never the server.

A record holds the inputs or examples, the outputs, model, version, signature,
time and a request id of its own; never headers, metadata, API keys or client
certificates: the data plane never sees them. The writer thread closes a file
at its age limit even when no request comes. ``stop()`` writes what is queued
and closes the file. Every method is thread-safe; ``offer`` and ``submit``
never raise.
"""
from __future__ import annotations

import errno
import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from serving import codec
from serving.capture import CaptureWriter, SystematicSampler
from serving.server.flags import ServerFlags
from serving.server.metrics import CaptureCounts
from serving.wire import apis

__all__ = ["ORIGIN", "CaptureSettings", "CapturedCall", "ServerRequestCapture", "capture_settings"]

logger = logging.getLogger(__name__)

ORIGIN = "embedded-server"
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_FILE_SECONDS = 300.0
MAX_QUEUE_BYTES = 64 * 1024 * 1024
_TICK_SECONDS = 1.0
Method = Literal["predict", "classify", "regress", "multi_inference"]


@dataclass(frozen=True)
class CaptureSettings:
    """What to capture, where, and the bounds; ``capture_settings(flags)`` reads them from the flags."""

    directory: str
    sample_rate: float
    max_bytes: int
    max_day_bytes: int | None = None
    exclude_models: frozenset[str] = frozenset()
    queue_records: int = 1024
    queue_bytes: int = MAX_QUEUE_BYTES
    max_file_bytes: int = MAX_FILE_BYTES
    max_file_seconds: float = MAX_FILE_SECONDS


def capture_settings(flags: ServerFlags) -> CaptureSettings | None:
    """The flags' capture settings; None when ``--request_capture_dir`` is empty (capture off)."""
    if not flags.request_capture_dir:
        return None
    excluded = frozenset(n.strip() for n in flags.request_capture_exclude_models.split(",") if n.strip())
    return CaptureSettings(
        directory=flags.request_capture_dir, sample_rate=flags.request_capture_sample_rate,
        max_bytes=flags.request_capture_max_bytes, max_day_bytes=flags.request_capture_max_bytes_per_day or None,
        exclude_models=excluded, queue_records=flags.request_capture_queue_size,
        max_file_bytes=min(MAX_FILE_BYTES, max(1, flags.request_capture_max_bytes // 8)))


@dataclass(frozen=True)
class CapturedCall:
    """One successful call as the data plane saw it; the writer thread turns it into a PredictionLog.

    ``spec`` is what the request asked for (name, version or label,
    signature); ``answer`` what ran: a ``Prediction`` or ``InferenceResult``
    (duck-typed: ``name``, ``version``, ``signature_name`` and ``outputs`` or
    ``result``), or a list of them for MultiInference. ``inputs`` (Predict) or
    ``examples`` (a ``tensorflow.serving.Input``) is the decoded request.
    """

    method: Method
    spec: Any
    answer: Any
    inputs: Mapping[str, np.ndarray] | None = None
    output_filter: Sequence[str] = ()
    examples: Any = None
    tasks: Sequence[Any] = ()
    time: float = field(default_factory=time.time)

    def size_bytes(self) -> int:
        """About what the record holds in memory while queued (array bytes, examples' message size)."""
        arrays = list((self.inputs or {}).values()) + list(getattr(self.answer, "outputs", {}).values())
        size = sum(int(getattr(a, "nbytes", 0)) for a in arrays)
        return size + (self.examples.ByteSize() if self.examples is not None else 0)


class ServerRequestCapture:
    """Sampled, queued, budgeted capture of the data plane's calls (see the module docstring).

    ``start()`` creates the directory (0700) and starts the writer thread;
    ``stop(timeout)`` writes what is queued and closes the file.
    """

    def __init__(self, settings: CaptureSettings) -> None:
        self.settings = settings
        self._writer: CaptureWriter | None = None
        self._samplers: dict[str, SystematicSampler] = {}
        self._queue: deque[tuple[CapturedCall, int]] = deque()
        self._queued_bytes = 0
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._excluded = self._dropped_queue_full = self._build_errors = 0

    @property
    def writer(self) -> CaptureWriter:
        assert self._writer is not None, "start() first"
        return self._writer

    def start(self) -> None:
        """Open the directory (OSError if it cannot be created or written) and start the writer thread."""
        s = self.settings
        if os.path.isdir(s.directory) and not os.access(s.directory, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, "the server's user cannot write there", s.directory)
        self._writer = CaptureWriter(
            s.directory, origin=ORIGIN, max_file_bytes=s.max_file_bytes, max_file_seconds=s.max_file_seconds,
            max_total_bytes=s.max_bytes, max_day_bytes=s.max_day_bytes,
            setting_names={"max_total_bytes": "--request_capture_max_bytes",
                           "max_day_bytes": "--request_capture_max_bytes_per_day"})
        self._thread = threading.Thread(target=self._drain, name="request-capture-writer", daemon=True)
        self._thread.start()
        logger.info("Request capture: %g of the requests to %s (budget %d bytes, --request_capture_max_bytes%s)",
                    s.sample_rate, self.writer.directory, s.max_bytes,
                    f"; never {', '.join(sorted(s.exclude_models))}" if s.exclude_models else "")

    def stop(self, timeout: float = 10.0) -> None:
        """Write the queued records (for up to ``timeout`` s) and close the file. Idempotent."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._writer is not None:
            self._writer.close()

    # -- the data plane's side (request threads) ------------------------------------------------
    def offer(self, model_name: str) -> bool:
        """Whether to capture this request of ``model_name``; cheap, never raises."""
        if model_name in self.settings.exclude_models:
            with self._cond:
                self._excluded += 1
            return False
        sampler = self._samplers.get(model_name)
        if sampler is None:
            sampler = self._samplers.setdefault(model_name, SystematicSampler(self.settings.sample_rate))
        return sampler.sample()

    def submit(self, call: CapturedCall) -> None:
        """Queue ``call`` for the writer thread; a full queue drops it (counted). Never waits, never raises."""
        try:
            size = call.size_bytes()
        except Exception:  # noqa: BLE001 - capture must never fail a request
            size = 0
        with self._cond:
            full = (len(self._queue) >= self.settings.queue_records
                    or (self._queue and self._queued_bytes + size > self.settings.queue_bytes))
            if full or self._stopping:
                self._dropped_queue_full += 1
                return
            self._queue.append((call, size))
            self._queued_bytes += size
            self._cond.notify()

    # -- metrics -------------------------------------------------------------------------------
    def counts(self) -> CaptureCounts:
        """Records per outcome and the writer's state, for ``metrics.CaptureMetrics``."""
        stats = self.writer.stats()
        with self._cond:
            records = {"written": stats.written, "excluded": self._excluded,
                       "dropped_queue_full": self._dropped_queue_full, "dropped_budget": stats.dropped_budget,
                       "dropped_write_error": stats.dropped_error + self._build_errors}
        budgets = {"max_total_bytes": self.settings.max_bytes}
        if self.settings.max_day_bytes:
            budgets["max_day_bytes"] = self.settings.max_day_bytes
        return CaptureCounts(records, stats.used_bytes, budgets, stats.stopped_by)

    # -- the writer thread ---------------------------------------------------------------------
    def _drain(self) -> None:
        while True:
            with self._cond:
                if not self._queue and not self._stopping:
                    self._cond.wait(_TICK_SECONDS)
                if not self._queue:
                    if self._stopping:
                        return
                    call, size = None, 0
                else:
                    call, size = self._queue.popleft()
            if call is None:
                self.writer.rotate_if_due()
                continue
            self._write(call)
            with self._cond:
                self._queued_bytes -= size

    def _write(self, call: CapturedCall) -> None:
        try:
            log = prediction_log_of(call, self.settings.sample_rate)
        except Exception:
            logger.exception("Request capture: could not build the record of a %s call; dropped", call.method)
            with self._cond:
                self._build_errors += 1
            return
        self.writer.write(log)


# -- building the PredictionLog ------------------------------------------------------------------
def prediction_log_of(call: CapturedCall, sampling_rate: float) -> Any:
    """The PredictionLog of ``call`` (serving.wire's message); runs on the writer thread."""
    log = apis.PredictionLog()
    answer = call.answer
    if call.method == "predict":
        entry = log.predict_log
        _requested_spec(entry.request.model_spec, call.spec, answer.signature_name)
        for name, array in (call.inputs or {}).items():
            codec.ndarray_to_tensor_proto(array, entry.request.inputs[name])
        entry.request.output_filter.extend(call.output_filter)
        _answered_spec(entry.response.model_spec, answer)
        for name, array in answer.outputs.items():
            codec.ndarray_to_tensor_proto(array, entry.response.outputs[name])
    elif call.method in ("classify", "regress"):
        entry = log.classify_log if call.method == "classify" else log.regress_log
        _requested_spec(entry.request.model_spec, call.spec, answer.signature_name)
        entry.request.input.ParseFromString(call.examples.SerializeToString())
        _answered_spec(entry.response.model_spec, answer)
        _fill_result(entry.response.result, answer.result)
    else:
        entry = log.multi_inference_log
        for task in call.tasks:
            added = entry.request.tasks.add(method_name=task.method_name)
            added.model_spec.name, added.model_spec.signature_name = task.model_name, task.signature_name
        entry.request.input.ParseFromString(call.examples.SerializeToString())
        for one in answer:
            result = entry.response.results.add()
            _answered_spec(result.model_spec, one)
            _fill_result(result.classification_result if hasattr(one.result, "classifications")
                         else result.regression_result, one.result)
    _metadata(log.log_metadata, call, sampling_rate)
    return log


def _requested_spec(proto: Any, spec: Any, signature_name: str) -> None:
    proto.name = spec.name
    if spec.version is not None:
        proto.version.value = spec.version
    elif spec.version_label:
        proto.version_label = spec.version_label
    proto.signature_name = signature_name


def _answered_spec(proto: Any, answer: Any) -> None:
    proto.name, proto.signature_name = answer.name, answer.signature_name
    proto.version.value = answer.version


def _fill_result(proto: Any, result: Any) -> None:
    if hasattr(result, "classifications"):
        for row in result.classifications:
            classes = proto.classifications.add().classes
            for cls in row.classes:
                classes.add(label=cls.label, score=cls.score)
    else:
        for regression in result.regressions:
            proto.regressions.add(value=regression.value)


def _metadata(meta: Any, call: CapturedCall, sampling_rate: float) -> None:
    answers = call.answer if call.method == "multi_inference" else [call.answer]
    first = answers[0] if answers else None
    meta.model_spec.name = first.name if first is not None else call.spec.name
    if first is not None:
        meta.model_spec.version.value = first.version
        if call.method != "multi_inference":
            meta.model_spec.signature_name = first.signature_name
    meta.sampling_config.sampling_rate = sampling_rate
    meta.saved_model_tags.append("serve")
    micros = int(call.time * 1_000_000)
    meta.timestamp_secs, meta.timestamp_micros = micros // 1_000_000, micros
    meta.request_origin = ORIGIN
    meta.request_id = uuid.uuid4().hex[:16]
