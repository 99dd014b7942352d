"""TF Serving's text-proto config files, parsed with the real protos.

The compose stack (real TF Serving) and the embedded server read the same
files: ``models.config`` (``ModelServerConfig``), ``batching.config``
(``BatchingParameters``) and ``monitoring.config`` (``MonitoringConfig``); and
``--ssl_config_file`` (``SSLConfig``) where TLS is on.

Submodules: ``models`` (rendering ``models.config`` from the zoo table of
``serving.model_repo`` and checking it), ``names`` (the model-name rule),
``config_lock`` (the lock and compare-and-swap every change of a served config
holds), ``rollbacks`` (versions rolled back, which no writer serves as stable
again), ``compose`` (the compose ``tfserving`` service's arguments
remapped for the embedded server) and ``cli`` (``python -m serving.config
check|render|add|remove``).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, Union

from google.protobuf import text_format
from google.protobuf.message import Message

from serving.config.protos import batching_parameters_class, monitoring_config_class, ssl_config_class

if TYPE_CHECKING:  # tensorflow_serving's protos load only when a config is read
    from tensorflow_serving.config.model_server_config_pb2 import ModelServerConfig

__all__ = [
    "load_model_server_config",
    "load_batching_parameters",
    "load_monitoring_config",
    "load_ssl_config",
    "parse_text_proto",
]

PathLike = Union[str, Path]
M = TypeVar("M", bound=Message)


def parse_text_proto(text: str, message: M) -> M:
    """Parse ``text`` into ``message``; ValueError naming the proto on failure."""
    try:
        return text_format.Parse(text, message)
    except text_format.ParseError as exc:
        raise ValueError(f"invalid {type(message).__name__} text proto: {exc}") from exc


def load_model_server_config(path: PathLike) -> ModelServerConfig:
    """A ``tensorflow.serving.ModelServerConfig`` from a text-proto file."""
    from tensorflow_serving.config import model_server_config_pb2  # tensorflow_serving: only when a config is read

    return parse_text_proto(Path(path).read_text(), model_server_config_pb2.ModelServerConfig())


def load_batching_parameters(path: PathLike) -> Message:
    """A ``tensorflow.serving.BatchingParameters`` from a text-proto file."""
    return parse_text_proto(Path(path).read_text(), batching_parameters_class()())


def load_monitoring_config(path: PathLike) -> Message:
    """A ``tensorflow.serving.MonitoringConfig`` from a text-proto file."""
    return parse_text_proto(Path(path).read_text(), monitoring_config_class()())


def load_ssl_config(path: PathLike) -> Message:
    """A ``tensorflow.serving.SSLConfig`` from a text-proto file."""
    return parse_text_proto(Path(path).read_text(), ssl_config_class()())
