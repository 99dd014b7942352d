"""The compose files as the tests render them: the GPU and CPU variants, a Grafana password, the environment."""
from __future__ import annotations

import os

from serving.checkout import REPO_ROOT
from serving.config.compose import read_dotenv

__all__ = ["GPU", "CPU", "PASSWORD", "compose_env", "dotenv", "flags"]

GPU = [REPO_ROOT / "docker-compose.yml"]
CPU = [REPO_ROOT / "docker-compose.yml", REPO_ROOT / "docker-compose.cpu.yml"]
PASSWORD = "test-only-password"


def compose_env(**extra: str) -> dict:
    """This process's environment without what the tests set themselves, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("GRAFANA_ADMIN_PASSWORD", "COMPOSE_PROFILES")}
    return {**env, **extra}


def dotenv() -> dict[str, str]:
    """The checkout's ``.env``."""
    return read_dotenv(REPO_ROOT)


def flags(command: list[str]) -> dict[str, str]:
    """A ``--name=value`` command line as a dict."""
    return dict(item.lstrip("-").split("=", 1) for item in command)
