"""What every zoo model hands to the exporter."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

import numpy as np

if TYPE_CHECKING:  # annotations only: importing this module loads no TensorFlow
    from tensorflow.types.experimental import GenericFunction

    from serving.codec import JSON

__all__ = ["BuiltModel", "SEED"]

SEED = 0


@dataclass
class BuiltModel:
    """A trained (or seeded) zoo model, ready to be traced into signatures.

    The exporter saves exactly the variables the traced signatures read
    (not the Keras objects), so ``core`` only needs to close over the model.
    ``core`` is the numeric part of the model (no string ops, no parsing); a
    variant may wrap it, e.g. ``tf.function(core, jit_compile=True)`` for XLA.
    ``make_signatures(core)`` returns ``{signature key: tf.function}``, each
    with a fixed ``input_signature`` (batch dimension ``None``) and a dict of
    named outputs. ``golden_inputs`` holds real inputs per signature;
    ``top1_outputs`` names, per signature, the output whose argmax is the
    predicted class (for top-1 agreement between precisions).
    """

    name: str
    core: Callable[..., Any]
    make_signatures: Callable[[Callable[..., Any]], dict[str, GenericFunction]]
    golden_inputs: Mapping[str, Mapping[str, np.ndarray]]
    labels: Mapping[str, np.ndarray] = field(default_factory=dict)
    top1_outputs: Mapping[str, str] = field(default_factory=dict)
    accuracy: Optional[float] = None
    metrics: Mapping[str, JSON] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
