"""The compose model as Compose itself renders it (the real Compose v2 binary, offline).

``gpu_model`` / ``cpu_model`` are what ``docker compose up`` starts (no profile);
``every_service`` renders each variant with every profile on (``COMPOSE_PROFILES=*``),
so dcgm-exporter (profile ``gpu-metrics``) is held to the same rules.
"""
from __future__ import annotations

import pytest

from serving.config.compose import load_compose_model
from tests.support.compose import CPU, GPU, PASSWORD, compose_env

@pytest.fixture(scope="session")
def gpu_model() -> dict:
    return load_compose_model(GPU, env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD))


@pytest.fixture(scope="session")
def cpu_model() -> dict:
    return load_compose_model(CPU, env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD))


@pytest.fixture(scope="session")
def gpu_model_all_profiles() -> dict:
    return load_compose_model(GPU, env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD, COMPOSE_PROFILES="*"))


@pytest.fixture(scope="session")
def cpu_model_all_profiles() -> dict:
    return load_compose_model(CPU, env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD, COMPOSE_PROFILES="*"))


@pytest.fixture(scope="session")
def every_service(gpu_model_all_profiles: dict, cpu_model_all_profiles: dict) -> dict[str, dict]:
    """``"<variant>/<service>"`` → the service, for every service of both variants and every profile."""
    return {f"{variant}/{name}": service
            for variant, model in (("gpu", gpu_model_all_profiles), ("cpu", cpu_model_all_profiles))
            for name, service in model["services"].items()}
