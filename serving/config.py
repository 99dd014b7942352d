"""TF Serving's text-proto config files, parsed with the real protos.

The compose stack (real TF Serving) and the embedded server read the same
files: ``models.config`` (``ModelServerConfig``), ``batching.config``
(``BatchingParameters``) and ``monitoring.config`` (``MonitoringConfig``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Union

__all__ = [
    "load_model_server_config",
    "load_batching_parameters",
    "load_monitoring_config",
    "parse_text_proto",
]

PathLike = Union[str, Path]


def parse_text_proto(text: str, message):
    """Parse ``text`` into ``message``; ValueError naming the proto on failure."""
    from google.protobuf import text_format

    try:
        return text_format.Parse(text, message)
    except text_format.ParseError as exc:
        raise ValueError(f"invalid {type(message).__name__} text proto: {exc}") from exc


def load_model_server_config(path: PathLike):
    """A ``tensorflow.serving.ModelServerConfig`` from a text-proto file."""
    from tensorflow_serving.config import model_server_config_pb2

    return parse_text_proto(Path(path).read_text(), model_server_config_pb2.ModelServerConfig())


def load_batching_parameters(path: PathLike):
    """A ``tensorflow.serving.BatchingParameters`` from a text-proto file."""
    from tensorflow_serving.servables.tensorflow import session_bundle_config_pb2

    return parse_text_proto(Path(path).read_text(), session_bundle_config_pb2.BatchingParameters())


def load_monitoring_config(path: PathLike):
    """A ``tensorflow.serving.MonitoringConfig`` from a text-proto file."""
    from tensorflow_serving.config import monitoring_config_pb2

    return parse_text_proto(Path(path).read_text(), monitoring_config_pb2.MonitoringConfig())
