"""What the export pipeline takes: one model, whatever it came from, ready to be traced.

A zoo model (``exporter.zoo.BuiltModel``, via :meth:`Exportable.from_built`)
and a user's model (``exporter.sources.prepare``) both become an
:class:`Exportable`; ``exporter.export`` has one pipeline for it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

import numpy as np

from exporter.zoo.base import BuiltModel

if TYPE_CHECKING:  # annotations only: importing this module loads no TensorFlow
    from tensorflow.types.experimental import GenericFunction

    from serving.codec import JSON

__all__ = ["Exportable", "SignatureFunctions", "SignatureFactory", "ExportError"]


class ExportError(RuntimeError):
    """The model cannot be exported as asked, or the export does not behave like the model.

    The message says what broke and how to fix it; nothing was published for
    the variant that raised it.
    """

SignatureFunctions = dict[str, "GenericFunction"]
"""``{signature key: tf.function}``, each with a fixed input signature."""
SignatureFactory = Callable[[bool], SignatureFunctions]
"""``make_signatures(jit_compile)`` → fresh ``SignatureFunctions``."""


@dataclass(frozen=True)
class Exportable:
    """A model ready to be saved as TF Serving versions.

    ``make_signatures(jit_compile)`` returns fresh ``tf.function``s, one per
    signature key, each with a fixed ``input_signature`` (batch dimension
    ``None``, every other dimension known) and a dict of named outputs; with
    ``jit_compile=True`` the numeric part runs under ``tf.function(jit_compile=True)``
    (the ``xla`` variant). ``golden_inputs`` holds the rows replayed through
    every export and tiled into the warmup, per signature; ``golden_source``
    says where they came from (``exporter.manifest.GOLDEN_SOURCES``).
    ``model_digest`` is a sha256 of the model itself (None for the zoo, whose
    model is the exporter's code). ``root`` is the object whose lookup tables
    and other resources the signatures may capture (None: they capture only
    variables). ``warmup_inputs`` holds, per signature, rows the warmup takes
    instead of the goldens (a capture's: ``warmup_source`` says which).
    """

    name: str
    make_signatures: SignatureFactory
    golden_inputs: Mapping[str, Mapping[str, np.ndarray]]
    golden_source: str = "zoo"
    source: str = "zoo"
    model_digest: Optional[str] = None
    root: Any = None
    labels: Mapping[str, np.ndarray] = field(default_factory=dict)
    top1_outputs: Mapping[str, str] = field(default_factory=dict)
    accuracy: Optional[float] = None
    metrics: Mapping[str, JSON] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    warmup_inputs: Mapping[str, Mapping[str, np.ndarray]] = field(default_factory=dict)
    warmup_source: str = ""

    @classmethod
    def from_built(cls, built: BuiltModel) -> "Exportable":
        """A zoo model: its ``core`` is what the xla variant compiles."""

        def make_signatures(jit_compile: bool) -> SignatureFunctions:
            import tensorflow as tf  # TensorFlow: only when a model is traced

            return built.make_signatures(tf.function(built.core, jit_compile=True) if jit_compile
                                         else built.core)

        return cls(name=built.name, make_signatures=make_signatures, golden_inputs=built.golden_inputs,
                   labels=built.labels, top1_outputs=built.top1_outputs, accuracy=built.accuracy,
                   metrics=built.metrics, notes=built.notes)
