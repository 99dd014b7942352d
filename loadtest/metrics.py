"""Server-side latency split from TF Serving's Prometheus page: queueing against runtime.

A sweep scrapes the REST port's monitoring path before and after each level
and takes the delta of each histogram's ``_sum`` and ``_count``: the mean
request, batch-queueing and runtime latency of exactly that level's traffic.
"""
from __future__ import annotations

import re
import urllib.request
from dataclasses import dataclass
from typing import Mapping, Optional

__all__ = [
    "REQUEST_LATENCY",
    "RUNTIME_LATENCY",
    "QUEUING_LATENCY",
    "PROCESSED_BATCH_SIZE",
    "Scrape",
    "ServerSplit",
    "parse_histogram_totals",
    "scrape",
    "split_between",
]

REQUEST_LATENCY = ":tensorflow:serving:request_latency"
RUNTIME_LATENCY = ":tensorflow:serving:runtime_latency"
QUEUING_LATENCY = ":tensorflow:serving:batching_session:queuing_latency"
PROCESSED_BATCH_SIZE = ":tensorflow:serving:batching_session:processed_batch_size"
_HISTOGRAMS = (REQUEST_LATENCY, RUNTIME_LATENCY, QUEUING_LATENCY, PROCESSED_BATCH_SIZE)
# Histograms labelled by model; the batching ones are per thread pool and are summed whole.
_PER_MODEL = (REQUEST_LATENCY, RUNTIME_LATENCY)
_SAMPLE = re.compile(r'^(?P<name>[^\s{]+?)_(?P<kind>sum|count)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Scrape:
    """``_sum`` and ``_count`` totals per histogram (µs for latencies) at one moment."""

    sums: Mapping[str, float]
    counts: Mapping[str, float]


def parse_histogram_totals(text: str, model_name: Optional[str] = None) -> Scrape:
    """Totals of the histograms above in a Prometheus page, restricted to ``model_name`` where labelled."""
    sums = {name: 0.0 for name in _HISTOGRAMS}
    counts = {name: 0.0 for name in _HISTOGRAMS}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or match["name"] not in sums:
            continue
        labels = dict(_LABEL.findall(match["labels"] or ""))
        if match["name"] in _PER_MODEL:
            if (model_name and labels.get("model_name") != model_name) or labels.get("API") == "":
                continue  # another model, or a GET (model status/metadata) rather than inference
        target = sums if match["kind"] == "sum" else counts
        target[match["name"]] += float(match["value"])
    return Scrape(sums, counts)


def scrape(metrics_url: str, model_name: Optional[str] = None, timeout: float = 10.0) -> Optional[Scrape]:
    """Fetch and parse the page; ``None`` when it cannot be read (the split is then left empty)."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=timeout) as response:
            return parse_histogram_totals(response.read().decode("utf-8", "replace"), model_name)
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class ServerSplit:
    """Mean server-side latencies (ms) over an interval; ``None`` where the server recorded nothing."""

    request_ms: Optional[float]
    queue_ms: Optional[float]
    runtime_ms: Optional[float]
    batch_size_mean: Optional[float]
    requests: float

    def as_dict(self) -> dict[str, Optional[float]]:
        return {"server_request_ms": self.request_ms, "server_queue_ms": self.queue_ms,
                "server_runtime_ms": self.runtime_ms, "server_batch_size_mean": self.batch_size_mean,
                "server_requests": self.requests}


def split_between(before: Optional[Scrape], after: Optional[Scrape]) -> ServerSplit:
    """The per-interval means from two scrapes (delta of ``_sum`` over delta of ``_count``)."""
    if before is None or after is None:
        return ServerSplit(None, None, None, None, 0.0)

    def mean(name: str, scale: float) -> Optional[float]:
        count = after.counts[name] - before.counts[name]
        return (after.sums[name] - before.sums[name]) / count * scale if count > 0 else None

    return ServerSplit(
        request_ms=mean(REQUEST_LATENCY, 1e-3), queue_ms=mean(QUEUING_LATENCY, 1e-3),
        runtime_ms=mean(RUNTIME_LATENCY, 1e-3), batch_size_mean=mean(PROCESSED_BATCH_SIZE, 1.0),
        requests=after.counts[REQUEST_LATENCY] - before.counts[REQUEST_LATENCY])
