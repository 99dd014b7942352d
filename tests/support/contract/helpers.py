"""Golden data and comparisons shared by the contract tests."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from exporter.manifest import Manifest, load_manifest

__all__ = ["manifest", "assert_outputs_match", "examples_from_serialized", "text"]


def manifest(repo: Path, directory: str, version: int = 1) -> Manifest:
    return load_manifest(repo / directory / str(version))


def text(values: Any) -> np.ndarray:
    """Bytes or str arrays as str arrays, so gRPC (bytes) and REST (str) answers compare."""
    array = np.asarray(values, dtype=object)
    return np.vectorize(lambda v: v.decode() if isinstance(v, bytes) else str(v), otypes=[object])(array)


def assert_outputs_match(got: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray],
                         tolerance: Mapping[str, float]) -> None:
    assert set(got) == set(expected)
    for key, want in expected.items():
        have = np.asarray(got[key])
        assert have.shape == want.shape, (key, have.shape, want.shape)
        if want.dtype == object:
            assert (text(have) == text(want)).all(), key
        else:
            np.testing.assert_allclose(have.astype(want.dtype), want, rtol=tolerance.get("rtol", 1e-4),
                                       atol=tolerance.get("atol", 1e-5), err_msg=key)


def examples_from_serialized(serialized: np.ndarray) -> list[dict]:
    """Golden serialized tf.Examples as feature dicts (the contract clients' input form)."""
    from tensorflow.core.example import example_pb2

    examples = []
    for data in serialized.reshape(-1):
        example = example_pb2.Example.FromString(bytes(data))
        features = {}
        for key, feature in example.features.feature.items():
            kind = feature.WhichOneof("kind")
            values = list(getattr(feature, kind).value)
            features[key] = values if len(values) != 1 else values[0]
        examples.append(features)
    return examples
