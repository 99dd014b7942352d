"""Fixtures for the lifecycle tests: tiny real SavedModels and managers that always stop."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tests.support.lifecycle import Metrics  # noqa: E402
from tests.support.models import export_tiny  # noqa: E402


@pytest.fixture(scope="session")
def affine_templates(tmp_path_factory) -> dict[float, Path]:
    """Built once: the tiny model with scale 1, 2 and 3 (the scale identifies a version)."""
    root = tmp_path_factory.mktemp("affine-templates")
    return {scale: export_tiny(root / f"scale{int(scale)}", scale) for scale in (1.0, 2.0, 3.0)}


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def make_manager(metrics) -> Iterator[Callable]:
    """Build started ``ServableManager``s (fast retries, 0.1 s polling); all stopped at teardown."""
    from serving.server.core.manager import ServableManager
    from serving.server.tensorflow.loader import LoaderOptions, SavedModelLoader

    managers = []

    def make(poll: float = 0.1, *, retries: int = 1, retry_interval_micros: int = 20_000,
             **kwargs) -> ServableManager:
        loader_fields = {k: kwargs.pop(k) for k in list(kwargs)
                         if k in LoaderOptions.__dataclass_fields__}
        manager = ServableManager(SavedModelLoader(LoaderOptions(**loader_fields), metrics),
                                  max_num_load_retries=retries, load_retry_interval_micros=retry_interval_micros,
                                  file_system_poll_wait_seconds=poll, **kwargs)
        manager.start()
        managers.append(manager)
        return manager

    yield make
    for manager in managers:
        manager.stop()
