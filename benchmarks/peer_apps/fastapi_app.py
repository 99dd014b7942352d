"""FastAPI + the SavedModel's signature, served by uvicorn.

    MODEL_NAME=digits MODEL_PATH=/models/digits/1 uvicorn --factory --app-dir DIR fastapi_app:create_app --port PORT

The signature call runs in FastAPI's thread pool (a plain ``def`` endpoint), as
FastAPI's docs advise for blocking work.
"""
from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI
from savedmodel import SavedModelPredictor

__all__ = ["create_app"]


def create_app() -> FastAPI:
    """The app answering ``POST /v1/models/$MODEL_NAME:predict`` for the SavedModel at ``$MODEL_PATH``."""
    name, path = os.environ["MODEL_NAME"], os.environ["MODEL_PATH"]
    app = FastAPI()
    predictor = SavedModelPredictor(path)

    @app.post(f"/v1/models/{name}:predict")
    def predict(body: dict[str, Any]) -> dict[str, Any]:
        return {"predictions": predictor.predict(body["instances"])}

    return app
