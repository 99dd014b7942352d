"""The seed's strawman: Flask + the SavedModel's signature, served by gunicorn.

    gunicorn --workers 1 --threads 8 --bind 127.0.0.1:PORT 'flask_app:create_app("digits", "/models/digits/1")'

Run with ``python flask_app.py NAME PATH PORT`` it serves through Werkzeug's
threaded server instead, to try the app by hand.
"""
from __future__ import annotations

import sys

from flask import Flask, jsonify, request
from savedmodel import SavedModelPredictor

__all__ = ["create_app"]


def create_app(name: str, path: str) -> Flask:
    """The Flask app answering ``POST /v1/models/<name>:predict``; the model loads here, once per worker."""
    app = Flask(__name__)
    predictor = SavedModelPredictor(path)

    @app.post(f"/v1/models/{name}:predict")
    def predict():
        body = request.get_json()
        return jsonify(predictions=predictor.predict(body["instances"]))

    return app


if __name__ == "__main__":
    create_app(sys.argv[1], sys.argv[2]).run("127.0.0.1", int(sys.argv[3]), threaded=True)
