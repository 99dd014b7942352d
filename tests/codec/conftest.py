"""Codec test fixtures: TensorFlow's own converters serve as the oracle."""
from __future__ import annotations

import os

import numpy as np
import pytest

NUMERIC_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                  np.uint32, np.uint64, np.float16, np.float32, np.float64]


def sample(dtype, shape=(2, 3), seed=0) -> np.ndarray:
    """Values that exercise the dtype's range (negatives, extremes) in ``shape``."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) > 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        flat = rng.integers(info.min, info.max, size=int(np.prod(shape)), dtype=dtype, endpoint=True)
        if flat.size >= 2:
            flat[0], flat[-1] = info.min, info.max
        return flat.reshape(shape)
    return (rng.standard_normal(shape) * 100).astype(dtype)


@pytest.fixture(scope="session")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow  # TensorFlow: loaded only by the tests that use it as the oracle
    return tensorflow
