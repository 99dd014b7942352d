"""A model repository with every model the CPU stack serves (exports cached across runs)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import _cached_export


@pytest.fixture(scope="session")
def cpu_stack_repo(model_repo: Path, resnet50_repo: Path) -> Path:
    """digits, text, ranker, resnet50 (fp32) and digits_xla, resnet50_xla, version 1 each."""
    root = _cached_export(("digits", "resnet50"), variant="xla")
    assert root == model_repo == resnet50_repo
    return root
