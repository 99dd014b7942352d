"""KServe's Python ``ModelServer`` with a custom ``kserve.Model`` around the SavedModel's signature.

    python kserve_app.py --model_name digits --model_dir /models/digits/1 --http_port PORT --grpc_port PORT2

KServe's v1 protocol is TF Serving's REST Predict: ``POST /v1/models/<name>:predict``
with ``{"instances": [...]}``, answered with ``{"predictions": [...]}``.
"""
from __future__ import annotations

import argparse
from typing import Any, Optional

import kserve
from savedmodel import SavedModelPredictor

__all__ = ["SavedModelKServe"]


class SavedModelKServe(kserve.Model):
    """A ``kserve.Model``: ``load()`` reads the SavedModel, ``predict()`` calls its signature."""

    def __init__(self, name: str, model_dir: str) -> None:
        super().__init__(name)
        self.model_dir = model_dir
        self.predictor: Optional[SavedModelPredictor] = None
        self.load()

    def load(self) -> bool:
        self.predictor = SavedModelPredictor(self.model_dir)
        self.ready = True
        return self.ready

    def predict(self, payload: dict[str, Any], headers: Optional[dict[str, str]] = None) -> dict[str, Any]:
        return {"predictions": self.predictor.predict(payload["instances"])}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(parents=[kserve.model_server.parser])
    parser.add_argument("--model_dir", required=True)
    args, _ = parser.parse_known_args()
    kserve.ModelServer().start([SavedModelKServe(args.model_name, args.model_dir)])
