"""``BatchingParameters`` and ``MonitoringConfig``: TF Serving's config protos.

The ``tensorflow-serving-api`` wheel ships ``ModelServerConfig`` but not
``session_bundle_config.proto`` (``BatchingParameters``) nor
``monitoring_config.proto`` (``MonitoringConfig``). Where the official
generated modules are importable they are used. Otherwise the two messages are
declared here with TF Serving's own package, names, field numbers and types
(``tensorflow_serving/servables/tensorflow/session_bundle_config.proto``,
``tensorflow_serving/config/monitoring_config.proto``), so text and wire
formats are the same as the server's.
"""
from __future__ import annotations

import functools

from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    wrappers_pb2,  # noqa: F401  (registers wrappers.proto in the pool)
)
from google.protobuf.message import Message

__all__ = ["batching_parameters_class", "monitoring_config_class"]

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


@functools.lru_cache(maxsize=None)
def batching_parameters_class() -> type[Message]:
    """The ``tensorflow.serving.BatchingParameters`` message class."""
    try:  # tensorflow_serving: the official module where a build ships it
        from tensorflow_serving.servables.tensorflow import session_bundle_config_pb2
        return session_bundle_config_pb2.BatchingParameters
    except ImportError:
        pass
    _declare("tensorflow_serving/servables/tensorflow/batching_parameters.proto",
             {"BatchingParameters": _BATCHING_FIELDS}, deps=("google/protobuf/wrappers.proto",))
    return _message_class("tensorflow.serving.BatchingParameters")


@functools.lru_cache(maxsize=None)
def monitoring_config_class() -> type[Message]:
    """The ``tensorflow.serving.MonitoringConfig`` message class."""
    try:  # tensorflow_serving: the official module where a build ships it
        from tensorflow_serving.config import monitoring_config_pb2
        return monitoring_config_pb2.MonitoringConfig
    except ImportError:
        pass
    _declare("tensorflow_serving/config/monitoring_config.proto", {
        "PrometheusConfig": (("enable", 1, "bool", "optional", None),
                             ("path", 2, "string", "optional", None)),
        "MonitoringConfig": (("prometheus_config", 1, "message", "optional",
                              ".tensorflow.serving.PrometheusConfig"),),
    })
    return _message_class("tensorflow.serving.MonitoringConfig")
