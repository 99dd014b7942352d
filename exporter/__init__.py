"""The exporter: any TensorFlow model → TF Serving version directories (``python -m exporter``).

A training script ends with::

    import exporter
    exporter.export(model, name="my_model", variants=("fp32", "xla"))   # {variant: version dir}

``model`` is a Keras model, a ``tf.Module`` with ``tf.function``\\ s, or a
path to a SavedModel directory or a ``.keras`` file (``exporter.export.export``).
Zoo models go through the same pipeline (``exporter.export.export_model``).
``exporter.export`` here is that function; its module's other names are
imported from it explicitly (``from exporter.export import export_model``).
Importing the package loads no TensorFlow.
"""
from exporter.export import ExportError, VariantFailed, export
from serving.codec import TensorSpec

__all__ = ["export", "ExportError", "VariantFailed", "TensorSpec"]
