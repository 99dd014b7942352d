"""Fixtures of the capture tests: the tiny model (tests.support.models) in a repository, and served in process."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from serving.server.core.manager import ServableManager
from tests.support.serving import tiny_manager_on, tiny_repo_at


@pytest.fixture(scope="session")
def tiny_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository root with model ``tiny`` at version 1 and a monitoring config (Prometheus on)."""
    return tiny_repo_at(tmp_path_factory.mktemp("capture-models"))


@pytest.fixture(scope="session")
def tiny_manager(tiny_repo: Path) -> Iterator[ServableManager]:
    """A real ``ServableManager`` in this process, ``tiny`` version 1 AVAILABLE."""
    with tiny_manager_on(tiny_repo) as manager:
        yield manager
