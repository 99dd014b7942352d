"""Request payloads built once from an exported model's manifest.

The exporter records real sample inputs in each version's ``manifest.json``
(digits images, strings for ``text``, ranker features). A load generator must
stay cheap, so everything a request needs is encoded here once: the
serialized ``PredictRequest`` bytes for gRPC (sent with identity serializers)
and the JSON body for REST. Nothing is encoded per request.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np

from exporter.manifest import load_manifest
from loadtest import DEFAULT_MODEL_REPO
from serving.codec import DEFAULT_SIGNATURE, encode_predict_request, inputs_to_rest_request
from serving.model_repo import latest_version_dir, published_name
from serving.wire import PREDICT

__all__ = [
    "Target",
    "Payload",
    "build_payload",
    "published_name",  # re-exported from serving.model_repo, where the rule is defined
]


@dataclass(frozen=True)
class Target:
    """What the load is aimed at: model, variant, signature, version or label.

    ``version`` and ``version_label`` are exclusive (a ``ModelSpec`` holds one);
    with neither, the server's latest version answers. ``batch_size`` is the
    number of rows per request, taken from the manifest's samples (repeated
    when the manifest holds fewer).
    """

    model: str = "digits"
    variant: str = "fp32"
    signature: Optional[str] = None
    version: Optional[int] = None
    version_label: Optional[str] = None
    batch_size: int = 1
    model_repo: Path = DEFAULT_MODEL_REPO

    def __post_init__(self) -> None:
        if self.version is not None and self.version_label:
            raise ValueError("give a version or a version label, not both")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.version_label and not re.fullmatch(r"[A-Za-z0-9_]+", self.version_label):
            raise ValueError(f"version labels are [a-zA-Z0-9_]+, got {self.version_label!r}")

    @property
    def name(self) -> str:
        return published_name(self.model, self.variant)

    def version_dir(self) -> Path:
        model_dir = Path(self.model_repo) / self.name
        if self.version is not None:
            return model_dir / str(self.version)
        return latest_version_dir(model_dir)

    def replace(self, **changes: Any) -> "Target":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Payload:
    """One prebuilt request, in both wire forms."""

    model_name: str
    signature_name: str
    inputs: Mapping[str, np.ndarray]
    grpc_method: str
    grpc_request: bytes
    rest_path: str

    @functools.cached_property
    def rest_body(self) -> bytes:
        """The REST ``:predict`` JSON body (row format), encoded on first use."""
        return _rest_body(self.signature_name, self.inputs)

    @property
    def label(self) -> str:
        """A short name for stats tables: ``digits:serving_default``."""
        return f"{self.model_name}:{self.signature_name}"


def build_payload(target: Target) -> Payload:
    """Read the manifest of ``target`` and encode one request (gRPC bytes now, the REST body on first use)."""
    manifest = load_manifest(target.version_dir())
    signature = target.signature or DEFAULT_SIGNATURE
    inputs = manifest.sample_inputs(signature, batch_size=target.batch_size)
    return Payload(
        model_name=target.name,
        signature_name=signature,
        inputs=inputs,
        grpc_method=_predict_method(),
        grpc_request=_predict_request_bytes(target, signature, inputs),
        rest_path=_rest_path(target),
    )


def _rest_path(target: Target) -> str:
    path = f"/v1/models/{target.name}"
    if target.version is not None:
        path += f"/versions/{target.version}"
    elif target.version_label:
        path += f"/labels/{target.version_label}"
    return path + ":predict"


def _rest_body(signature: str, inputs: Mapping[str, np.ndarray]) -> bytes:
    return inputs_to_rest_request(dict(inputs), signature_name=signature, row_format=True)


def _predict_request_bytes(target: Target, signature: str, inputs: Mapping[str, np.ndarray]) -> bytes:
    return encode_predict_request(target.name, dict(inputs), version=target.version,
                                  version_label=target.version_label, signature_name=signature)


def _predict_method() -> str:
    return PREDICT
