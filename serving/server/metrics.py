"""TF Serving's Prometheus metrics, with TF Serving's names, labels and buckets.

``ServerMetrics`` keeps the metrics the real ``tensorflow_model_server``
exports (``servables/tensorflow/util.cc``, ``batching/batching_session.cc``,
``batching/batching_util.h``, ``saved_model_warmup_util.cc`` and TF core's
``cc/saved_model/loader.cc``) and registers them, as one collector, in an
injected ``prometheus_client.CollectorRegistry``.

``render()`` writes the page the way TF Serving's ``util/prometheus_exporter.cc``
does, so dashboards and alerts written against the real server work unchanged:

- names are TF's with every character outside ``[a-zA-Z0-9_]`` turned into ``:``
  (``/tensorflow/serving/request_count`` → ``:tensorflow:serving:request_count``);
- only ``# TYPE`` lines (no ``# HELP``), counters carry no ``_total``/``_created``;
- histograms are cumulative ``_bucket{...,le="<limit>"}`` lines with TF's limits
  (printed like ``absl::StrCat(double)``, i.e. ``%g``) and a final ``le="+Inf"``,
  then ``_sum`` and ``_count``; a series without labels is written ``name{}``;
- a sample lands in the first bucket whose limit is *greater* than it
  (``std::upper_bound`` in TF's ``Histogram::Add``).

Deliberate differences: ``_sum`` is printed with full precision (TF rounds it
to six significant digits, which makes ``rate(..._sum)`` step); a newline in a
label value is escaped as ``\\n`` (TF leaves it raw, which breaks the page);
``CONTENT_TYPE`` names the text format's version (TF sends bare ``text/plain``);
every family's ``# TYPE`` line is present from the start (TF declares its
batching families only once batching has run); a request naming a model that
is not served is counted under ``model_name=""`` (``UNSERVED_MODEL_LABEL``;
TF Serving records whatever name the request gives, so any client can add
series without bound: the data plane maps the name before recording).

Thread-safety: every method may be called from any thread; one lock guards
all series. Lifecycle: none — the object only holds numbers; it is registered
in its registry on construction and stays there.
"""
from __future__ import annotations

import bisect
import re
import threading
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from serving.status import Code

__all__ = [
    "CONTENT_TYPE",
    "UNSERVED_MODEL_LABEL",
    "ServerMetrics",
    "exponential_buckets",
    "prometheus_name",
    "render_registry",
    "CAPTURE_OUTCOMES",
    "CAPTURE_STOP_REASONS",
    "CaptureCounts",
    "CaptureMetrics",
]

#: The text exposition format (TF Serving itself sends plain ``text/plain``).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: The ``model_name`` of a request whose model is not served (TF Serving keeps the request's own name).
UNSERVED_MODEL_LABEL = ""

LabelValues = Tuple[str, ...]


def exponential_buckets(scale: float, growth: float, count: int) -> Tuple[float, ...]:
    """TF's ``Buckets::Exponential``: ``count`` finite limits, each the last times ``growth``."""
    limits: List[float] = []
    bound = float(scale)
    for _ in range(count):
        limits.append(bound)
        bound *= growth
    return tuple(limits)


def prometheus_name(tf_name: str) -> str:
    """TF Serving's exporter rule: every char outside ``[a-zA-Z0-9_]`` becomes ``:``."""
    name = re.sub(r"[^a-zA-Z0-9_]", ":", tf_name)
    return "_" + name if name[:1].isdigit() else name


_LATENCY_BUCKETS = exponential_buckets(10, 1.8, 33)        # µs, ~24 min
_QUEUING_BUCKETS = exponential_buckets(100, 1.2, 52)       # µs, ~1 s
_BATCH_SIZE_BUCKETS = exponential_buckets(1, 2, 14)        # 1 … 8192
_EXAMPLE_COUNT_BUCKETS = exponential_buckets(1, 2, 15)


class _Family:
    """One metric family: a TF name, a type, label names and its series."""

    def __init__(self, tf_name: str, kind: str, label_names: Sequence[str],
                 limits: Sequence[float] = (), documentation: str = "") -> None:
        self.name = prometheus_name(tf_name)
        self.kind = kind
        self.documentation = documentation   # prometheus_client's help; TF Serving's page prints none
        self.label_names = tuple(label_names)
        self.limits = tuple(limits)
        self.le = tuple(_format_limit(limit) for limit in limits) + ("+Inf",)
        # counter: labels -> [value]; histogram: labels -> [bucket counts..., sum]
        self.series: Dict[LabelValues, List[float]] = {}

    def add(self, labels: LabelValues, amount: float) -> None:
        """Counter increment. Caller holds the metrics lock."""
        cell = self.series.get(labels)
        if cell is None:
            cell = self.series[labels] = [0]
        cell[0] += amount

    def observe(self, labels: LabelValues, value: float) -> None:
        """Histogram sample. Caller holds the metrics lock."""
        cell = self.series.get(labels)
        if cell is None:
            cell = self.series[labels] = [0] * (len(self.limits) + 1) + [0.0]
        cell[bisect.bisect_right(self.limits, value)] += 1
        cell[-1] += value

    def snapshot(self) -> Metric:
        """A prometheus_client ``Metric`` with TF's sample names (caller holds the lock)."""
        metric = Metric(self.name, self.documentation, self.kind)
        for labels in sorted(self.series):
            cell = self.series[labels]
            named = dict(zip(self.label_names, labels))
            if self.kind == "counter":
                metric.add_sample(self.name, named, cell[0])
                continue
            cumulative = 0
            for le, count in zip(self.le, cell):
                cumulative += count
                metric.add_sample(self.name + "_bucket", {**named, "le": le}, cumulative)
            metric.add_sample(self.name + "_sum", named, cell[-1])
            metric.add_sample(self.name + "_count", named, cumulative)
        return metric


class ServerMetrics:
    """The model server's metrics; see the module docstring for the format.

    ``registry`` is injected (a fresh ``CollectorRegistry`` when None); the
    metrics register there as one collector, so two ``ServerMetrics`` cannot
    share a registry. Every ``record_*`` method is thread-safe and cheap
    (one lock, a dict lookup, a bisect).
    """

    CONTENT_TYPE = CONTENT_TYPE

    def __init__(self, registry: Optional[CollectorRegistry] = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        fam = _Family
        # Ordered like TF's CollectionRegistry (a std::map keyed by TF name).
        self._request_count = fam(
            "/tensorflow/serving/request_count", "counter", ("model_name", "status"),
            documentation="The total number of requests. A model that is not served is counted under "
                          "model_name=\"\" (TF Serving keeps the request's own name).")
        self._request_latency = fam("/tensorflow/serving/request_latency", "histogram",
                                    ("model_name", "API", "entrypoint"), _LATENCY_BUCKETS)
        self._runtime_latency = fam("/tensorflow/serving/runtime_latency", "histogram",
                                    ("model_name", "API", "runtime"), _LATENCY_BUCKETS)
        self._example_counts = fam("/tensorflow/serving/request_example_counts", "histogram",
                                   ("model",), _EXAMPLE_COUNT_BUCKETS)
        self._example_total = fam("/tensorflow/serving/request_example_count_total", "counter", ("model",))
        self._queuing_latency = fam("/tensorflow/serving/batching_session/queuing_latency", "histogram",
                                    ("thread_pool_name",), _QUEUING_BUCKETS)
        self._wrapped_run_count = fam("/tensorflow/serving/batching_session/wrapped_run_count", "counter", ())
        self._input_batch_size = fam("/tensorflow/serving/batching_session/input_batch_size", "histogram",
                                     (), _BATCH_SIZE_BUCKETS)
        self._processed_batch_size = fam("/tensorflow/serving/batching_session/processed_batch_size",
                                         "histogram", (), _BATCH_SIZE_BUCKETS)
        self._padding_size = fam("/tensorflow/serving/batching_session/padding_size", "histogram",
                                 ("execution_batch_size",), _BATCH_SIZE_BUCKETS)
        self._warmup_latency = fam("/tensorflow/serving/model_warmup_latency", "histogram",
                                   ("model_path", "status"), _LATENCY_BUCKETS)
        self._warmup_records = fam("/tensorflow/serving/model_warmup_records_read", "counter",
                                   ("model_path", "status"))
        self._load_attempts = fam("/tensorflow/cc/saved_model/load_attempt_count", "counter",
                                  ("model_path", "status"))
        self._load_latency = fam("/tensorflow/cc/saved_model/load_latency", "counter", ("model_path",))
        self._families = sorted(
            (v for v in vars(self).values() if isinstance(v, _Family)), key=lambda f: f.name)
        self.registry.register(self)

    # -- requests -----------------------------------------------------------------------------
    def record_request(self, model_name: str, api: str, entrypoint: str, code: Code | int,
                       latency_us: float) -> None:
        """One finished request: ``request_count`` always, ``request_latency`` only when OK.

        ``api`` is ``Predict``/``Classify``/``Regress`` for gRPC and the URL verb
        (``predict``/``classify``/``regress``) for REST; ``entrypoint`` is
        ``GRPC`` or ``REST``; ``code`` becomes the canonical name (``OK``,
        ``NOT_FOUND`` ...). ``model_name`` must be a served model's name or
        ``UNSERVED_MODEL_LABEL``: every distinct value is a series kept for good.
        """
        code = Code(code)
        with self._lock:
            self._request_count.add((model_name, code.name), 1)
            if code is Code.OK:
                self._request_latency.observe((model_name, api, entrypoint), latency_us)

    def record_runtime(self, model_name: str, api: str, latency_us: float, runtime: str = "TF1") -> None:
        """Time spent in the model run alone (TF's session run), per model and API."""
        with self._lock:
            self._runtime_latency.observe((model_name, api, runtime), latency_us)

    def record_examples(self, model_name: str, count: int) -> None:
        """tf.Examples in one Classify/Regress request (``request_example_counts`` and ``_total``)."""
        with self._lock:
            self._example_counts.observe((model_name,), count)
            self._example_total.add((model_name,), count)

    # -- model lifecycle ----------------------------------------------------------------------
    def record_load(self, model_path: str, ok: bool, latency_us: float) -> None:
        """A SavedModel load attempt: ``load_attempt_count{status=success|fail}`` and ``load_latency``."""
        with self._lock:
            self._load_attempts.add((model_path, "success" if ok else "fail"), 1)
            self._load_latency.add((model_path,), int(latency_us))

    def record_warmup(self, model_path: str, ok: bool, latency_us: float, records: int,
                      error: Optional[BaseException | str] = None) -> None:
        """A warmup run. The ``status`` label is TF's ``Status::ToString()``:
        ``OK``, or ``"<CODE>: <message>"`` built from ``error`` when not ``ok``."""
        label = "OK" if ok else _status_string(error)
        with self._lock:
            self._warmup_latency.observe((model_path, label), latency_us)
            self._warmup_records.add((model_path, label), records)

    # -- batching (recorded by serving.server.batching.{queue,batch}) ----------------------------------
    def record_input_batch_size(self, size: int) -> None:
        """0th-dim size of one input tensor of a submitted task (TF records one per tensor)."""
        with self._lock:
            self._input_batch_size.observe((), size)

    def record_queuing_latency(self, thread_pool_name: str, latency_us: float) -> None:
        """Time one task waited between submit and its batch starting."""
        with self._lock:
            self._queuing_latency.observe((thread_pool_name,), latency_us)

    def record_batch(self, processed_size: int, padding_size: int) -> None:
        """One merged batch: its size after padding, and how many padding rows it got."""
        with self._lock:
            self._processed_batch_size.observe((), processed_size)
            self._padding_size.observe((str(processed_size),), padding_size)

    def record_wrapped_run(self) -> None:
        """One run of the wrapped model on a merged batch."""
        with self._lock:
            self._wrapped_run_count.add((), 1)

    def record_queuing_latencies(self, thread_pool_name: str, latencies_us: Sequence[float]) -> None:
        """``record_queuing_latency`` for each task of a batch, under one lock (the batcher's call)."""
        labels = (thread_pool_name,)
        with self._lock:
            for latency_us in latencies_us:
                self._queuing_latency.observe(labels, latency_us)

    # -- exposition ---------------------------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        """prometheus_client's collector protocol; one snapshot taken under the lock."""
        with self._lock:
            snapshots = [family.snapshot() for family in self._families]
        return iter(snapshots)

    def describe(self) -> List[Metric]:
        """Family names only, so registering never takes a snapshot."""
        return [Metric(family.name, family.documentation, family.kind) for family in self._families]

    def render(self) -> bytes:
        """The whole registry in TF Serving's exposition format (see module docstring)."""
        return render_registry(self.registry)


#: Every outcome of a request offered to request capture (``request_capture_records{outcome=...}``).
CAPTURE_OUTCOMES = ("written", "excluded", "dropped_queue_full", "dropped_budget", "dropped_write_error")
#: Why capture may be stopped (``request_capture_stopped{reason=...}``): a budget's setting, or the disk.
CAPTURE_STOP_REASONS = ("max_total_bytes", "max_day_bytes", "write_error")


@dataclass(frozen=True)
class CaptureCounts:
    """Request capture's state when scraped: records per outcome, the directory's bytes, budgets, stop reason."""

    records: Mapping[str, int]
    used_bytes: int
    budgets: Mapping[str, int]
    stopped_by: Optional[str]


class CaptureMetrics:
    """Request capture's metrics (embedded-only; TF Serving has no request capture), TF-style names.

    - ``:tensorflow:serving:request_capture_records{outcome}`` (counter): requests of a captured model
      and what became of them: ``written``, ``excluded`` (``--request_capture_exclude_models``),
      ``dropped_queue_full`` (the writer thread was behind), ``dropped_budget`` (a byte budget is
      reached), ``dropped_write_error`` (the disk refused the write);
    - ``:tensorflow:serving:request_capture_bytes`` (gauge): bytes of capture files in the directory;
    - ``:tensorflow:serving:request_capture_budget_bytes{budget}`` (gauge): ``max_total_bytes`` and,
      when set, ``max_day_bytes``;
    - ``:tensorflow:serving:request_capture_stopped{reason}`` (gauge): 1 for the reason capture is
      stopped (``max_total_bytes``, ``max_day_bytes``, ``write_error``), 0 for the others.

    ``source`` is read at each scrape; registered in ``registry`` on construction.
    """

    def __init__(self, source: Callable[[], CaptureCounts], registry: CollectorRegistry) -> None:
        self._source = source
        registry.register(self)

    def collect(self) -> Iterator[Metric]:
        counts = self._source()
        families = []
        for tf_name, kind, label, values in (
                ("/tensorflow/serving/request_capture_records", "counter", "outcome",
                 {outcome: counts.records.get(outcome, 0) for outcome in CAPTURE_OUTCOMES}),
                ("/tensorflow/serving/request_capture_bytes", "gauge", None, {"": counts.used_bytes}),
                ("/tensorflow/serving/request_capture_budget_bytes", "gauge", "budget", dict(counts.budgets)),
                ("/tensorflow/serving/request_capture_stopped", "gauge", "reason",
                 {reason: int(counts.stopped_by == reason) for reason in CAPTURE_STOP_REASONS})):
            name = prometheus_name(tf_name)
            metric = Metric(name, "", kind)
            for key, value in values.items():
                metric.add_sample(name, {label: key} if label else {}, value)
            families.append(metric)
        return iter(families)

    def describe(self) -> List[Metric]:
        return []


def render_registry(registry: CollectorRegistry) -> bytes:
    """Every family in ``registry``, written the way TF Serving's exporter writes its page."""
    lines: List[str] = []
    for metric in registry.collect():
        lines.append(f"# TYPE {metric.name} {_TYPE_NAMES.get(metric.type, metric.type)}")
        for sample in metric.samples:
            lines.append(_sample_line(sample.name, sample.labels, sample.value))
    return ("\n".join(lines) + "\n").encode()


_TYPE_NAMES = {"unknown": "untyped"}


def _sample_line(name: str, labels: Dict[str, str], value: float) -> str:
    body = ",".join(f'{key}="{_escape(val)}"' for key, val in labels.items())
    return f"{name}{{{body}}} {_format_value(value)}"


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _format_limit(limit: float) -> str:
    """``absl::StrCat(double)``: six significant digits, like C's ``%g``."""
    return "%g" % limit


def _format_value(value: float) -> str:
    """Integers as TF prints its int64 cells; anything else with full precision."""
    if float(value).is_integer() and abs(value) < 2 ** 53:
        return str(int(value))
    return repr(float(value))


def _status_string(error: Optional[BaseException | str]) -> str:
    code = getattr(error, "code", None)
    if isinstance(code, Code):
        return f"{code.name}: {getattr(error, 'details', str(error))}"
    return f"UNKNOWN: {error}" if error else "UNKNOWN"
