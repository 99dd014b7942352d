"""``BatchingParameters``, ``MonitoringConfig`` and ``SSLConfig``: TF Serving's config protos.

The ``tensorflow-serving-api`` wheel ships ``ModelServerConfig`` but not
``session_bundle_config.proto`` (``BatchingParameters``),
``monitoring_config.proto`` (``MonitoringConfig``) nor ``ssl_config.proto``
(``SSLConfig``). Where the official generated modules are importable they are
used. Otherwise the messages are declared here with TF Serving's own package,
names, field numbers and types
(``tensorflow_serving/servables/tensorflow/session_bundle_config.proto``,
``tensorflow_serving/config/monitoring_config.proto``,
``tensorflow_serving/config/ssl_config.proto``), so text and wire formats are
the same as the server's.
"""
from __future__ import annotations

import functools
import importlib

from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    wrappers_pb2,  # noqa: F401  (registers wrappers.proto in the pool)
)
from google.protobuf.message import Message

__all__ = ["batching_parameters_class", "monitoring_config_class", "ssl_config_class"]

_INT64 = ".google.protobuf.Int64Value"
_STRING = ".google.protobuf.StringValue"
_BOOL = ".google.protobuf.BoolValue"

# BatchingParameters fields: (name, number, type, label, wrapper type name).
_BATCHING_FIELDS = (
    ("max_batch_size", 1, "message", "optional", _INT64),
    ("batch_timeout_micros", 2, "message", "optional", _INT64),
    ("max_enqueued_batches", 3, "message", "optional", _INT64),
    ("num_batch_threads", 4, "message", "optional", _INT64),
    ("thread_pool_name", 5, "message", "optional", _STRING),
    ("allowed_batch_sizes", 6, "int64", "repeated", None),
    ("pad_variable_length_inputs", 7, "bool", "optional", None),
    ("enable_large_batch_splitting", 8, "message", "optional", _BOOL),
    ("max_execution_batch_size", 9, "message", "optional", _INT64),
)


def _declare(file_name: str, messages: dict[str, tuple], deps: tuple[str, ...] = ()) -> None:
    types = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name=file_name, package="tensorflow.serving",
                                               syntax="proto3", dependency=list(deps))
    for message_name, fields in messages.items():
        message = proto.message_type.add(name=message_name)
        for name, number, kind, label, type_name in fields:
            field = message.field.add(name=name, number=number, json_name=_camel(name),
                                      type=getattr(types, f"TYPE_{kind.upper()}"),
                                      label=getattr(types, f"LABEL_{label.upper()}"))
            if type_name:
                field.type_name = type_name
    descriptor_pool.Default().Add(proto)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _message_class(full_name: str) -> type[Message]:
    return message_factory.GetMessageClass(descriptor_pool.Default().FindMessageTypeByName(full_name))


def _official_or_declared(module: str, message: str, file_name: str, messages: dict[str, tuple],
                          deps: tuple[str, ...] = ()) -> type[Message]:
    """``module.message`` where a build ships TF Serving's generated module, else the declared twin."""
    try:  # tensorflow_serving: the official module where a build ships it
        return getattr(importlib.import_module(module), message)
    except ImportError:
        pass
    _declare(file_name, messages, deps)
    return _message_class(f"tensorflow.serving.{message}")


@functools.lru_cache(maxsize=None)
def batching_parameters_class() -> type[Message]:
    """The ``tensorflow.serving.BatchingParameters`` message class."""
    return _official_or_declared(
        "tensorflow_serving.servables.tensorflow.session_bundle_config_pb2", "BatchingParameters",
        "tensorflow_serving/servables/tensorflow/batching_parameters.proto",
        {"BatchingParameters": _BATCHING_FIELDS}, deps=("google/protobuf/wrappers.proto",))


@functools.lru_cache(maxsize=None)
def monitoring_config_class() -> type[Message]:
    """The ``tensorflow.serving.MonitoringConfig`` message class."""
    return _official_or_declared(
        "tensorflow_serving.config.monitoring_config_pb2", "MonitoringConfig",
        "tensorflow_serving/config/monitoring_config.proto", {
            "PrometheusConfig": (("enable", 1, "bool", "optional", None),
                                 ("path", 2, "string", "optional", None)),
            "MonitoringConfig": (("prometheus_config", 1, "message", "optional",
                                  ".tensorflow.serving.PrometheusConfig"),),
        })


@functools.lru_cache(maxsize=None)
def ssl_config_class() -> type[Message]:
    """The ``tensorflow.serving.SSLConfig`` message class (``--ssl_config_file``)."""
    return _official_or_declared(
        "tensorflow_serving.config.ssl_config_pb2", "SSLConfig", "tensorflow_serving/config/ssl_config.proto", {
            "SSLConfig": (("server_key", 1, "string", "optional", None),
                          ("server_cert", 2, "string", "optional", None),
                          ("custom_ca", 3, "string", "optional", None),
                          ("client_verify", 4, "bool", "optional", None)),
        })
