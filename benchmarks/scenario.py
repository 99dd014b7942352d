"""What every benchmark scenario is built from: a model's payloads, and Predict on a server over
gRPC or REST as a transport of the one driver (``loadtest.driver``); ``benchmarks.runner`` runs them."""
from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Protocol, Sequence

import grpc
import numpy as np

from exporter.manifest import load_manifest
from loadtest.driver import Transport, grpc_transport, http_transport
from serving import codec, wire
from serving.model_repo import model_versions

__all__ = ["Endpoint", "Payloads", "predict_transport", "version_dir"]


class Endpoint(Protocol):
    """Where a server answers Predict (``ServerProcess`` is one)."""

    @property
    def grpc_target(self) -> str: ...

    @property
    def rest_url(self) -> str: ...


def version_dir(repo: Path, model: str) -> Path:
    """The newest version of ``model`` in ``repo``: the one a server serves by default."""
    versions = model_versions(repo / model)
    if not versions:
        raise SystemExit(f"{model} has no version in {repo}")
    return repo / model / str(max(versions))


@dataclass(frozen=True)
class Payloads:
    """One request of ``model`` from its manifest: the arrays, PredictRequest bytes and REST body."""

    model: str
    inputs: Mapping[str, np.ndarray]
    grpc: bytes
    rest: bytes

    @classmethod
    def of(cls, repo: Path, model: str, batch_size: int = 1) -> "Payloads":
        inputs = load_manifest(version_dir(repo, model)).sample_inputs(batch_size=batch_size)
        return cls(model, inputs, codec.encode_predict_request(model, inputs, signature_name=codec.DEFAULT_SIGNATURE),
                   codec.inputs_to_rest_request(inputs))

    @property
    def rest_path(self) -> str:
        return f"/v1/models/{self.model}:predict"


def predict_transport(protocol: str, address: str, payloads: Payloads, *, timeout: float = 120.0,
                      credentials: Optional[grpc.ChannelCredentials] = None,
                      metadata: Sequence[tuple[str, str]] = (), ssl_context: Optional[ssl.SSLContext] = None,
                      headers: Optional[dict[str, str]] = None) -> Transport:
    """Raw Predict bytes over ``grpc`` (``address`` HOST:PORT) or ``rest`` (``address`` a base URL)."""
    if protocol == "grpc":
        return grpc_transport(address, wire.PREDICT, payloads.grpc, timeout=timeout, credentials=credentials,
                              metadata=metadata)
    if protocol == "rest":
        return http_transport(address, payloads.rest_path, payloads.rest, timeout=timeout, headers=headers,
                              ssl_context=ssl_context)
    raise ValueError(f"protocol must be grpc or rest, got {protocol!r}")
