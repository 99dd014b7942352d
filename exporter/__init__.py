"""The exporter: zoo models → TF Serving version directories (``python -m exporter``).

Import :func:`exporter.export.export_model` and friends from their modules;
importing the package loads nothing heavy.
"""
__all__: list[str] = []
