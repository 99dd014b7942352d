"""Capture records for the tests: a Predict log of known rows and request id."""
from __future__ import annotations

import numpy as np

from serving.capture import prediction_log
from serving.codec import ndarray_to_tensor_proto
from serving.wire import apis


def predict_log(request_id: str = "r", *, model: str = "digits", rows: int = 1, when: float | None = None):
    request = apis.PredictRequest()
    request.model_spec.name = model
    ndarray_to_tensor_proto(np.full((rows, 4), 0.5, np.float32), request.inputs["x"])
    return prediction_log("predict", request, None, model=model, origin="embedded-server", request_id=request_id,
                          sampling_rate=1.0, signature="serving_default", when=when)
