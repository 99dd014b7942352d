"""TF Serving's wire schema, declared by this project (no TensorFlow needed).

Messages live in ``serving_apis_pb2`` (proto package ``tfs_stack.wire``, same
field numbers as ``tensorflow.serving``); ``methods`` holds TF Serving's gRPC
method paths and the Any type URL of the signature map.
"""
from serving.wire import serving_apis_pb2 as apis
from serving.wire.methods import (
    CLASSIFY,
    GET_MODEL_METADATA,
    GET_MODEL_STATUS,
    PREDICT,
    REGRESS,
    RELOAD_CONFIG,
    SIGNATURE_DEF_MAP_TYPE_URL,
)

__all__ = [
    "apis",
    "PREDICT",
    "CLASSIFY",
    "REGRESS",
    "GET_MODEL_METADATA",
    "GET_MODEL_STATUS",
    "RELOAD_CONFIG",
    "SIGNATURE_DEF_MAP_TYPE_URL",
]
