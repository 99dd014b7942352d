"""Consistency rules for ``batching.config`` and ``monitoring.config``."""
from __future__ import annotations

from typing import Iterable

from google.protobuf.message import Message

__all__ = ["check_batching_parameters", "check_warmup_fits", "check_monitoring_config"]


def check_batching_parameters(params: Message) -> list[str]:
    """Problems TF Serving would reject (or that defeat batching); empty when fine.

    TF Serving requires ``allowed_batch_sizes`` to increase with the last entry
    equal to ``max_batch_size``, and ``max_execution_batch_size`` (used with
    large-batch splitting) to be at most ``max_batch_size``.
    """
    problems = []
    max_batch = params.max_batch_size.value if params.HasField("max_batch_size") else None
    sizes = list(params.allowed_batch_sizes)
    if max_batch is not None and max_batch < 1:
        problems.append(f"max_batch_size {max_batch} must be >= 1")
    if sizes:
        if any(b <= a for a, b in zip(sizes, sizes[1:])) or sizes[0] < 1:
            problems.append(f"allowed_batch_sizes {sizes} must be positive and strictly increasing")
        if max_batch is not None and sizes[-1] != max_batch:
            problems.append(f"the last allowed_batch_sizes entry ({sizes[-1]}) must equal "
                            f"max_batch_size ({max_batch})")
    if params.HasField("num_batch_threads") and params.num_batch_threads.value < 1:
        problems.append("num_batch_threads must be >= 1")
    if params.HasField("max_enqueued_batches") and params.max_enqueued_batches.value < 1:
        problems.append("max_enqueued_batches must be >= 1")
    if params.HasField("max_execution_batch_size") and max_batch is not None \
            and params.max_execution_batch_size.value > max_batch:
        problems.append("max_execution_batch_size must be <= max_batch_size")
    return problems


def check_warmup_fits(params: Message, warmup_sizes: Iterable[int]) -> list[str]:
    """Problems if a warmup batch size exceeds ``max_batch_size`` (the load would fail).

    The exporter writes warmup requests for the GPU profile's
    ``allowed_batch_sizes``; with batching on, every profile must accept them.
    """
    if not params.HasField("max_batch_size") or params.enable_large_batch_splitting.value:
        return []
    too_big = sorted(s for s in warmup_sizes if s > params.max_batch_size.value)
    return [f"warmup batch sizes {too_big} exceed max_batch_size {params.max_batch_size.value}: "
            "loading a model with those warmup requests fails"] if too_big else []


def check_monitoring_config(config: Message) -> list[str]:
    """Problems that would leave Prometheus without TF Serving's metrics."""
    prometheus = config.prometheus_config
    problems = []
    if not prometheus.enable:
        problems.append("prometheus_config.enable is false: /monitoring/prometheus/metrics would 404")
    if prometheus.path and not prometheus.path.startswith("/"):
        problems.append(f"prometheus_config.path {prometheus.path!r} must start with '/'")
    return problems
