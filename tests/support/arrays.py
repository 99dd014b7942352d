"""Arrays for the codec tests: every numeric dtype, and values that exercise each one's range."""
from __future__ import annotations

import numpy as np

__all__ = ["NUMERIC_DTYPES", "sample"]

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
