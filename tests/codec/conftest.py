"""Codec test fixtures: TensorFlow's own converters serve as the oracle (the arrays are tests/support/arrays.py's)."""
from __future__ import annotations

import os

import pytest

@pytest.fixture(scope="session")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow  # TensorFlow: loaded only by the tests that use it as the oracle
    return tensorflow
