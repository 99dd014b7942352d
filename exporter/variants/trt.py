"""The ``trt-fp16`` variant: TF-TRT conversion at FP16 with dynamic shapes.

Follows the TF 2.17 API (tf-serving.md §7.4; TF 2.17.x is the last TensorFlow
and TF Serving with TF-TRT). Engines are pre-built with ``converter.build()``
for every allowed batch size (one optimisation profile each, strategy
``Optimal``) and saved with the model (``save_gpu_specific_engines=True``), so
they match the GPU type that built them: run the export on the serving GPU.

NOT RUN on the development machines of this project: they have no GPU and no
libnvinfer. :func:`unavailable_reason` detects that before any work starts;
the GPU exporter image of the compose stack is where this path runs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np

from serving.codec import DEFAULT_SIGNATURE

__all__ = ["GPU_COMMAND", "unavailable_reason", "convert"]

GPU_COMMAND = "docker compose run --rm exporter export --model {model} --variant trt-fp16"


def unavailable_reason() -> Optional[str]:
    """Why TF-TRT cannot run here (None when it can): no TensorRT runtime, or no GPU.

    ``is_tensorrt_enabled()`` is TensorFlow's own check: the wheel was built
    with TensorRT *and* ``libnvinfer`` could be dlopen'ed (TF logs
    "TF-TRT Warning: Could not find TensorRT" when it cannot).
    """
    import tensorflow as tf  # TensorFlow: only when a trt-fp16 export is asked for

    problems = []
    try:
        from tensorflow.compiler.tf2tensorrt import _pywrap_py_utils as trt_utils  # TensorFlow: likewise
    except ImportError:
        problems.append(f"TensorFlow {tf.__version__} has no TF-TRT module")
    else:
        if not trt_utils.is_tensorrt_enabled():
            linked = ".".join(map(str, trt_utils.get_linked_tensorrt_version()))
            problems.append(f"TensorFlow {tf.__version__} cannot load the TensorRT runtime "
                            f"(libnvinfer {linked}, which this TensorFlow links against, is not installed)")
    if not tf.config.list_physical_devices("GPU"):
        problems.append("no GPU is visible to TensorFlow")
    return "; ".join(problems) or None


def convert(fp32_dir: Path, out_dir: Path, inputs: Mapping[str, np.ndarray],
            batch_sizes: Sequence[int], signature: str = DEFAULT_SIGNATURE) -> None:
    """Convert the FP32 SavedModel at ``fp32_dir`` into a TF-TRT FP16 one at ``out_dir``.

    ``inputs`` are real rows of ``signature``, cycled to each batch size to
    build one engine profile per allowed batch size. Only ``signature``
    survives the conversion (TF-TRT converts one signature).
    """
    from tensorflow.python.compiler.tensorrt import trt_convert as trt  # TensorFlow: only when converting

    converter = trt.TrtGraphConverterV2(
        input_saved_model_dir=str(fp32_dir),
        input_saved_model_signature_key=signature,
        precision_mode=trt.TrtPrecisionMode.FP16,
        use_dynamic_shape=True,
        dynamic_shape_profile_strategy="Optimal",
        maximum_cached_engines=max(1, len(batch_sizes)),
        allow_build_at_runtime=True)
    converter.convert()

    def input_fn():
        for batch_size in sorted(batch_sizes):
            rows = np.arange(batch_size) % len(next(iter(inputs.values())))
            yield {key: value[rows] for key, value in inputs.items()}

    converter.build(input_fn=input_fn)
    converter.save(str(out_dir), save_gpu_specific_engines=True)
