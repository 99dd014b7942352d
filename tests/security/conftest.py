"""Fixtures: the napping model exported once per session, and the embedded servers the attacks hit.

Servers are real (``serving.launcher.ServerProcess``) on 127.0.0.1,
with batching and the embedded server's default admission flags.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from serving.launcher import ServerProcess
from tests.support.security.attacks import HIGH_CAP_FLAGS, napping_repo, start_server


@pytest.fixture(scope="session")
def napping(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model repository with the napping model at version 1."""
    return napping_repo(tmp_path_factory.mktemp("security-models"))


@pytest.fixture(scope="module")
def server(napping: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The embedded server with batching and default flags."""
    process = start_server(napping, tmp_path_factory.mktemp("security-server"))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def high_cap_server(napping: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The same server whose operator raised --max_tensor_elements to 2**40."""
    process = start_server(napping, tmp_path_factory.mktemp("security-high-cap"), HIGH_CAP_FLAGS)
    yield process
    process.stop()
