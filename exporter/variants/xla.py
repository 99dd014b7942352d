"""The ``xla`` variant: the model's numeric part compiled with ``jit_compile=True``.

A zoo model compiles its numeric core (string parsing and tokenization stay
outside: XLA has no string ops); a user's model compiles each signature's
whole computation. Either way the signatures come from
``Exportable.make_signatures(jit_compile=True)``; everything numeric runs as
one XLA cluster per input shape. A model XLA cannot compile fails with
:func:`compile_error`'s message, which names the ops TensorFlow reported.

Serving note: real TF Serving disables XLA JIT unless started with
``--xla_cpu_compilation_enabled=true`` (``serving.model_repo.XLA_SERVING_FLAG``), on CPU and GPU
alike: TF Serving 2.17.1 has no ``--xla_gpu_compilation_enabled`` (it came in
2.18), and without the flag ``main.cc`` calls ``DisableXlaCompilation()``, so
these ``jit_compile`` functions cannot be compiled.
"""
from __future__ import annotations

import re
from typing import Optional

from serving.model_repo import XLA_SERVING_FLAG

__all__ = ["SERVING_NOTE", "compile_error"]

SERVING_NOTE = (
    "xla variant: the numeric core is a tf.function(jit_compile=True). Real TF Serving disables XLA JIT "
    f"unless tensorflow_model_server runs with {XLA_SERVING_FLAG} (CPU and GPU: 2.17.1 has no "
    "--xla_gpu_compilation_enabled); without it the jit_compile functions cannot be compiled.")

# tf2xla's words for an op without an XLA kernel, e.g.
# "StringLength (No registered 'StringLength' OpKernel for XLA_CPU_JIT devices compatible with node {{node len}}"
_UNSUPPORTED = re.compile(r"No registered '([^']+)' OpKernel for (\S+) devices compatible with node "
                          r"\{\{node ([^}]+)\}\}(?:\s*\(OpKernel was found, but attributes didn't match\) "
                          r"Requested Attributes: ([^{\n]*))?")
_DTYPE = re.compile(r"\bT=(DT_\w+)")


def compile_error(message: str) -> Optional[str]:
    """A readable account of a failed XLA compilation, naming each op; None if ``message`` is not one."""
    found: dict[str, str] = {}
    for op, device, node, attributes in _UNSUPPORTED.findall(message):
        dtype = _DTYPE.search(attributes or "")
        if op == "_Arg" and dtype:
            what = f"a {dtype.group(1)} argument (op _Arg, node {node}): XLA cannot take {dtype.group(1)} tensors"
        else:
            what = f"op {op} (node {node}" + (f", {dtype.group(1)}" if dtype else "") + ")"
        found.setdefault(what, device)
    if not found:
        if "tf2xla conversion failed" in message or "XLA compilation" in message:
            return "XLA cannot compile the model: " + message.strip().splitlines()[0]
        return None
    devices = "/".join(sorted(set(found.values())))
    return (f"XLA cannot compile the model: no {devices} kernel for {'; '.join(found)}. Keep string and other "
            "non-XLA ops out of the compiled signatures, or serve this model in fp32 only")
