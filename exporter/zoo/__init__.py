"""The model zoo: models built in code from bundled data or seeded weights (no downloads).

One model a module; each exposes ``build(*, progress: bool) -> BuiltModel`` and imports
TensorFlow, Keras and scikit-learn at its top: ``build`` imports a model's module only when
that model is built, so importing ``exporter.zoo`` loads none of them.
"""
from __future__ import annotations

import importlib

from exporter.zoo.base import BuiltModel

__all__ = ["MODELS", "BuiltModel", "build"]

MODELS: dict[str, str] = {
    "digits": "exporter.zoo.digits",
    "resnet50": "exporter.zoo.resnet50",
    "text": "exporter.zoo.text",
    "ranker": "exporter.zoo.ranker",
}


def build(name: str, *, progress: bool = True) -> BuiltModel:
    """Train (or seed) the zoo model ``name``; ValueError for an unknown name."""
    try:
        module = MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; the zoo has: {', '.join(MODELS)}") from None
    return importlib.import_module(module).build(progress=progress)
