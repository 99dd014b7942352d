"""What the SDK returns besides numpy arrays: model metadata and version status.

``ModelMetadata``, ``VersionStatus`` (its ``state`` a ``VersionState``, equal
to the state's name), ``TensorSpec`` and ``Signature`` are ``serving.codec``'s,
shared with the server and the exporter, and re-exported here. They are built
from the SDK's wire messages (``serving.wire``; REST answers are parsed into
the same messages), so gRPC and REST answers turn into equal values.
"""
from __future__ import annotations

from serving.codec import ModelMetadata, Signature, TensorSpec, VersionState, VersionStatus

__all__ = ["TensorSpec", "Signature", "ModelMetadata", "VersionState", "VersionStatus"]
