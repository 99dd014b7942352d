"""Fixtures of the make up tests (the CPU stack's model repository, ``cpu_stack_repo``, is tests/conftest.py's): a copy of
the checkout's compose files (the stand-in docker CLI is tests/support/docker_cli.py)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from serving.checkout import REPO_ROOT
from tests.support.docker_cli import SECRETS


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The compose files, .env, serving configs and Prometheus config of the checkout, and gateway secrets
    (empty files)."""
    root = tmp_path / "checkout"
    (root / "serving").mkdir(parents=True)
    for name in [".env", *(p.name for p in REPO_ROOT.glob("docker-compose*.yml"))]:
        shutil.copy(REPO_ROOT / name, root / name)
    for config in (REPO_ROOT / "serving").glob("*.config"):
        shutil.copy(config, root / "serving" / config.name)
    shutil.copytree(REPO_ROOT / "monitoring" / "prometheus", root / "monitoring" / "prometheus")
    secrets = root / "gateway" / "secrets"
    secrets.mkdir(parents=True)
    for name in [*SECRETS, "ca.key", "client.key"]:
        (secrets / name).write_text("test\n")
        (secrets / name).chmod(0o600)
    return root
