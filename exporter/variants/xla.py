"""The ``xla`` variant: the model's numeric core compiled with ``jit_compile=True``.

String parsing and tokenization stay outside the compiled function (XLA has
no string ops); everything numeric runs as one XLA cluster per input shape.

Serving note: real TF Serving disables XLA JIT unless started with
``--xla_cpu_compilation_enabled=true`` (or ``--xla_gpu_compilation_enabled=true``);
without the flag it calls ``DisableXlaCompilation()`` and these
``jit_compile`` functions cannot be compiled (tf-serving.md §6).
"""
from __future__ import annotations

from typing import Any

from exporter.zoo.base import BuiltModel

__all__ = ["SERVING_NOTE", "xla_signatures"]

SERVING_NOTE = (
    "xla variant: the numeric core is a tf.function(jit_compile=True). Real TF Serving disables XLA JIT "
    "unless tensorflow_model_server runs with --xla_cpu_compilation_enabled=true (CPU) or "
    "--xla_gpu_compilation_enabled=true (GPU); without it the jit_compile functions cannot be compiled.")


def xla_signatures(built: BuiltModel) -> dict[str, Any]:
    """The model's signatures with its core wrapped in ``tf.function(jit_compile=True)``."""
    import tensorflow as tf  # TensorFlow: only when exporting

    return built.make_signatures(tf.function(built.core, jit_compile=True))
