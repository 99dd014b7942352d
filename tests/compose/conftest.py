"""The compose model as Compose itself renders it (the real Compose v2 binary, offline)."""
from __future__ import annotations

import os

import pytest

from serving.config.compose import load_compose_model
from tests.support.servers import REPO_ROOT

GPU = [REPO_ROOT / "docker-compose.yml"]
CPU = [REPO_ROOT / "docker-compose.yml", REPO_ROOT / "docker-compose.cpu.yml"]
PASSWORD = "test-only-password"


def compose_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "GRAFANA_ADMIN_PASSWORD"}
    return {**env, **extra}


@pytest.fixture(scope="session")
def gpu_model() -> dict:
    return load_compose_model(GPU, env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD))


@pytest.fixture(scope="session")
def cpu_model() -> dict:
    return load_compose_model(CPU, env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD))
