"""The serving config the tuner searches: TF Serving's own flags and batching file, one dimension each.

Each dimension is a real ``tensorflow_model_server`` setting, applied on the
command line exactly as TF Serving takes it, so the embedded server and TF
Serving in Docker get the same flags:

==========================  =================================================================
dimension                   how it is applied
==========================  =================================================================
``gpu_memory_fraction``     ``--per_process_gpu_memory_fraction`` (GPU backends only)
``intra_op``                ``--tensorflow_intra_op_parallelism`` (0: TensorFlow picks, = cores)
``inter_op``                ``--tensorflow_inter_op_parallelism`` (0: TensorFlow picks, = cores)
``variant``                 which published model is served (``digits``, ``digits_xla``,
                            ``digits_trt_fp16``); ``xla`` adds ``--xla_cpu_compilation_enabled``
                            (on a GPU too: 2.17.1 has no GPU twin), without which TF Serving
                            refuses to compile ``jit_compile`` functions
``batching``                ``--enable_batching`` with ``--batching_parameters_file``
``max_batch_size`` ...      the fields of that ``BatchingParameters`` file
==========================  =================================================================

A config is a plain ``{dimension: value}`` mapping (:data:`DIMENSIONS` order),
which is what the coordinate descent walks. :func:`skipped_dimensions` says
which dimensions a backend cannot apply and why; the report lists them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Union

from google.protobuf.message import Message

from serving.config.protos import batching_parameters_class
from serving.model_repo import GPU_ONLY_VARIANTS, XLA_SERVING_FLAG, model_versions, published_name

__all__ = [
    "DIMENSIONS",
    "BATCHING_KNOBS",
    "SETTING_NAMES",
    "Backend",
    "Setting",
    "Config",
    "default_config",
    "default_grid",
    "quick_grid",
    "normalize",
    "server_flags",
    "batching_proto",
    "describe_value",
    "skipped_dimensions",
    "host_cpus",
]

Setting = Union[int, float, str]
"""One dimension's value: a GPU memory fraction, a thread count, a variant name, "on"/"off", a knob."""
Config = dict[str, Setting]
"""A point of the search: every dimension's value."""

BATCHING_KNOBS = ("max_batch_size", "batch_timeout_micros", "num_batch_threads", "max_enqueued_batches")
DIMENSIONS = ("gpu_memory_fraction", "intra_op", "inter_op", "variant", "batching", *BATCHING_KNOBS)

# The seed table's words for each dimension, and the TF Serving flag or file that carries it.
SETTING_NAMES: dict[str, str] = {
    "gpu_memory_fraction": "GPU memory (--per_process_gpu_memory_fraction)",
    "intra_op": "intra-op threads (--tensorflow_intra_op_parallelism)",
    "inter_op": "inter-op threads (--tensorflow_inter_op_parallelism)",
    "variant": "model variant / XLA (--xla_*_compilation_enabled)",
    "batching": "TF Serving batching (--enable_batching)",
    "max_batch_size": "batching: max_batch_size",
    "batch_timeout_micros": "batching: batch_timeout_micros",
    "num_batch_threads": "batching: num_batch_threads",
    "max_enqueued_batches": "batching: max_enqueued_batches",
}


def host_cpus() -> int:
    """The CPUs this process may run on (TensorFlow's ``port::MaxParallelism()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Backend:
    """Where the trials run: ``embedded`` (this checkout's server, CPU only) or ``docker`` (TF Serving's
    image; ``gpu`` for its ``-gpu`` image with the host's GPUs)."""

    name: str = "embedded"
    gpu: bool = False

    @property
    def xla_flag(self) -> str:
        """The flag TF Serving needs to compile ``jit_compile`` functions, on CPU and GPU alike."""
        return XLA_SERVING_FLAG


def default_config(variant: str = "fp32", batching_start: Optional[Mapping[str, int]] = None) -> Config:
    """TF Serving's defaults: threads auto, no XLA, no batching, TensorFlow's GPU memory choice.

    ``batching_start`` holds the batching parameters tried first once batching
    is on (the stack's ``batching.cpu.config``); they sit unused while it is off.
    """
    start = dict(batching_start or {})
    return {"gpu_memory_fraction": 0.0, "intra_op": 0, "inter_op": 0, "variant": variant, "batching": "off",
            **{k: int(start.get(k, 0)) for k in BATCHING_KNOBS}}


def default_grid(cpus: int, start: Mapping[str, Setting], variants: tuple[str, ...] = ("fp32", "xla", "trt-fp16"),
                 floor: int = 0) -> dict[str, tuple[Setting, ...]]:
    """Every dimension's values: thread counts around the core count, every variant, batching on/off and a
    grid of batching parameters (``max_batch_size`` never under ``floor``, the largest warmup batch)."""
    threads = tuple(sorted({0, 1, max(1, cpus // 2), 2 * cpus}))  # 0 (auto) is the core count already
    sizes = tuple(v for v in (8, 16, 32, 64, 128, 256) if v >= floor) or (floor,)
    return {"gpu_memory_fraction": (0.0, 0.3, 0.5, 0.8), "intra_op": threads, "inter_op": threads,
            "variant": variants, "batching": ("off", "on"), "max_batch_size": sizes,
            "batch_timeout_micros": (0, 500, 1000, 2000, 5000),
            "num_batch_threads": tuple(sorted({1, cpus, 2 * cpus})),
            "max_enqueued_batches": (4, 16, 64)}


def quick_grid(cpus: int, start: Mapping[str, Setting], variants: tuple[str, ...] = ("fp32", "xla", "trt-fp16"),
               floor: int = 0) -> dict[str, tuple[Setting, ...]]:
    """A smaller grid for ``--quick``: one value each side of auto for the threads, two batching timeouts,
    the batch-thread count at 1 and at the core count; no queue-length search."""
    full = default_grid(cpus, start, variants, floor)
    return {**full, "gpu_memory_fraction": (0.0, 0.5), "intra_op": (0, 1, 2 * cpus), "inter_op": (0, 1),
            "max_batch_size": (start["max_batch_size"],), "batch_timeout_micros": (0, 1000, 5000),
            "num_batch_threads": tuple(sorted({1, cpus})), "max_enqueued_batches": (start["max_enqueued_batches"],)}


def normalize(config: Mapping[str, Setting], start: Mapping[str, Setting]) -> Config:
    """``config`` with the batching parameters reset to ``start``'s while batching is off (they mean
    nothing then), so configs that serve alike compare equal and are measured once."""
    config = dict(config)
    if config["batching"] == "off":
        config.update({k: start[k] for k in BATCHING_KNOBS})
    return config


def server_flags(config: Mapping[str, Setting], backend: Backend) -> list[str]:
    """The ``tensorflow_model_server`` flags of ``config``, except the batching file and the model config
    (the launcher writes those); dimensions the backend cannot apply are left out."""
    flags = [f"--tensorflow_intra_op_parallelism={int(config['intra_op'])}",
             f"--tensorflow_inter_op_parallelism={int(config['inter_op'])}"]
    if config["variant"] == "xla":
        flags.append(backend.xla_flag)
    if backend.gpu and config["gpu_memory_fraction"]:
        flags.append(f"--per_process_gpu_memory_fraction={config['gpu_memory_fraction']:g}")
    return flags


def batching_proto(config: Mapping[str, Setting], base: Optional[Message] = None) -> Optional[Message]:
    """The ``BatchingParameters`` of ``config`` (``base``'s other fields kept), None while batching is off.

    ``allowed_batch_sizes`` from ``base`` are cut at the new ``max_batch_size``
    and closed with it (TF Serving requires the list to end at ``max_batch_size``).
    """
    if config["batching"] == "off":
        return None
    proto = batching_parameters_class()()
    if base is not None:
        proto.CopyFrom(base)
    for knob in BATCHING_KNOBS:
        if config.get(knob):
            getattr(proto, knob).value = int(config[knob])
    if proto.allowed_batch_sizes:
        top = proto.max_batch_size.value
        sizes = [s for s in proto.allowed_batch_sizes if s < top]
        del proto.allowed_batch_sizes[:]
        proto.allowed_batch_sizes.extend([*sizes, top])
    return proto


def describe_value(dimension: str, value: Setting, cpus: int) -> str:
    """A value as the table shows it: ``auto (2)`` for 0 threads, ``whole card`` for fraction 0, ..."""
    if dimension in ("intra_op", "inter_op"):
        return f"auto ({cpus})" if int(value) == 0 else str(int(value))
    if dimension == "gpu_memory_fraction":
        return "TF default (grows to the card)" if not value else f"{value:g} of the card"
    if dimension == "variant":
        return {"fp32": "fp32 (no XLA)", "xla": "xla (jit_compile)", "trt-fp16": "TF-TRT FP16"}.get(str(value), str(value))
    return str(value)


def skipped_dimensions(backend: Backend, model: str, model_repo: Path,
                       variants: tuple[str, ...] = ("fp32", "xla", "trt-fp16")) -> dict[str, str]:
    """``{dimension or variant: reason}`` for what ``backend`` cannot apply or ``model_repo`` does not hold.

    Variant keys are ``variant:NAME``; a skipped variant leaves the variant
    dimension searching the others.
    """
    skipped: dict[str, str] = {}
    if not backend.gpu:
        where = ("the embedded server runs TensorFlow's CPU build" if backend.name == "embedded"
                 else "TF Serving's CPU image has no GPU")
        skipped["gpu_memory_fraction"] = (f"no GPU: {where}, so --per_process_gpu_memory_fraction has no effect "
                                          "(run on a GPU host with --docker --gpu)")
    for variant in variants:
        name = published_name(model, variant)
        if not model_versions(Path(model_repo) / name):
            skipped[f"variant:{variant}"] = (f"no {name} in {model_repo}: export it with `python -m exporter export "
                                             f"(--model ZOO | --from PATH --name {model}) --variant {variant} "
                                             f"--model-repo {model_repo}`" if variant != "fp32" else
                                             f"no {name} in {model_repo}")
        elif variant in GPU_ONLY_VARIANTS and not backend.gpu:
            skipped[f"variant:{variant}"] = (f"{name} needs TF Serving's GPU image and the GPU its TensorRT "
                                             "engines were built on (--docker --gpu on a GPU host)")
    return skipped
