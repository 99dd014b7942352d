"""Which backend ``make up`` runs, from what the one Docker probe (``serving.stack.docker``) says.

- An engine answers and lists the ``nvidia`` runtime → ``compose-gpu``:
  ``docker-compose.yml`` with the ``gpu-metrics`` profile.
- An engine answers without it → ``compose-cpu``: ``docker-compose.yml`` +
  ``docker-compose.cpu.yml``.
- No engine → ``embedded``: the embedded server, with the CPU variant's
  ``tfserving`` command read from the compose files.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from serving.checkout import REPO_ROOT
from serving.config.compose import COMPOSE_FILES
from serving.stack.docker import probe_engine

__all__ = ["BACKENDS", "Choice", "docker_runtimes", "choose_backend", "compose_files", "compose_profiles"]

BACKENDS = ("compose-gpu", "compose-cpu", "embedded")


@dataclass(frozen=True)
class Choice:
    """Where the stack runs: ``compose-gpu``, ``compose-cpu`` or ``embedded``, and why."""

    backend: str
    reason: str


def docker_runtimes(docker: str = "docker", timeout: float = 20.0) -> tuple[Optional[set[str]], str]:
    """The engine's container runtimes (``docker info``), or None and why there is no engine."""
    engine = probe_engine(docker, timeout)
    return (set(engine.runtimes) if engine.answers else None), engine.reason


def choose_backend(runtimes: Optional[set[str]], why: str) -> Choice:
    """The backend for an engine with ``runtimes`` (None: no engine, for the reason ``why``)."""
    if runtimes is None:
        return Choice("embedded", f"{why}; running the embedded TF Serving-compatible server on CPU")
    if "nvidia" in runtimes:
        return Choice("compose-gpu", f"{why} with the nvidia runtime; running the GPU compose stack")
    return Choice("compose-cpu", f"{why} without the nvidia runtime (runtimes: "
                                 f"{', '.join(sorted(runtimes)) or 'none'}); running the CPU compose variant")


def compose_files(backend: str, root: Path = REPO_ROOT) -> list[Path]:
    """The compose files of ``backend`` (the embedded server reads the CPU variant's)."""
    return [root / f for f in COMPOSE_FILES["gpu" if backend == "compose-gpu" else "cpu"]]


def compose_profiles(backend: str) -> list[str]:
    """The compose profiles ``backend`` turns on: dcgm-exporter's ``gpu-metrics`` on a GPU host."""
    return ["gpu-metrics"] if backend == "compose-gpu" else []
