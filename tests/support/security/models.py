"""The security tests serve the tiny model (``tests.support.models``) as ``napping``, and overload it with its
``nap`` signature: a batch takes 2 x max(seconds) without burning a CPU, so a 2-core machine can overload the
server with a Python client. ``serving_default`` (``y = 2 x``) is the good request and the attacks' target.
"""
from __future__ import annotations

import numpy as np
from tensorflow_serving.apis import predict_pb2

from serving import codec

__all__ = ["MODEL", "nap_request"]

MODEL = "napping"


def nap_request(seconds: float) -> predict_pb2.PredictRequest:
    """A Predict of the ``nap`` signature: its batch naps 2 x ``seconds``."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name, request.model_spec.signature_name = MODEL, "nap"
    codec.ndarray_to_tensor_proto(np.array([seconds], np.float32), request.inputs["seconds"])
    return request
