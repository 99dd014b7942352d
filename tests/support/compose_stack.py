"""The compose stack on a real Docker engine, as the e2e tests run it: its project, files, services and the
``Stack`` a test talks to (ports, secrets, a compose runner), and the docker CLI.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from deploy.images import IMAGES
from gateway.certs import Credentials, init_secrets
from serving.checkout import REPO_ROOT
from serving.config.compose import compose_command, with_grafana_placeholder
from serving.launcher import free_port
from serving.stack.compose import plan_compose
from serving.stack.docker import image_id, probe_engine

__all__ = ["PROJECT_PREFIX", "PROJECT", "FILES", "SERVICES", "EXPORTED_IN_CONTAINER", "skip_reason", "Stack", "docker",
           "run_python", "remove_stale_projects", "copy_checkout", "running_stack"]

PROJECT_PREFIX = "tfs-stack-e2e-"
PROJECT = f"{PROJECT_PREFIX}{os.getpid()}"
FILES = ("docker-compose.yml", "docker-compose.cpu.yml", "docker-compose.local.yml")
SERVICES = ("exporter", "tfserving", "gateway", "prometheus")
# Exported in the container; every other CPU model comes from the test cache.
EXPORTED_IN_CONTAINER = "digits"
COPY_IGNORE = shutil.ignore_patterns(".git", ".venv", ".cache", "out", "secrets", "__pycache__", "*.pyc",
                                     ".pytest_cache")


def skip_reason() -> Optional[str]:
    """Why the compose stack cannot run here, or None."""
    reason = os.environ.get("TFS_STACK_NO_DOCKER_REASON")
    if reason:
        return f"no Docker engine: {reason}"
    engine = probe_engine()
    if not engine.answers:
        return f"{engine.reason}; make test starts one"
    missing = [i.name for i in IMAGES if image_id(i.name) is None]
    if missing:
        return f"local images not built: {', '.join(missing)} (make images)"
    return None


@dataclass
class Stack:
    """The running stack: its checkout copy, ports, secrets and a compose runner."""

    root: Path
    env: dict[str, str]
    secrets: Credentials
    grpc_port: int
    rest_port: int
    mtls_port: int
    prometheus_port: int
    up_output: str

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def rest_url(self) -> str:
        return f"https://127.0.0.1:{self.rest_port}"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    @property
    def work_dir(self) -> Path:
        return self.root / ".cache" / "serving"

    def compose(self, *args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
        cmd = [*compose_command(), *[a for f in FILES for a in ("-f", str(self.root / f))], *args]
        proc = subprocess.run(cmd, cwd=self.root, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def container(self, service: str) -> str:
        """The ID of ``service``'s container (also an exited one)."""
        ids = self.compose("ps", "-a", "-q", service).stdout.split()
        assert ids, f"no container for {service}"
        return ids[0]

    def inspect(self, service: str) -> dict:
        return json.loads(docker("inspect", self.container(service)).stdout)[0]

    def make_up(self, *extra: str, timeout: float = 1200) -> subprocess.CompletedProcess:
        """``make up IMAGES=local`` as the Makefile runs it, in the copy."""
        return run_python(["-m", "serving.stack", "--images", "local", *extra], cwd=self.root, env=self.env,
                          timeout=timeout)

    def python(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """``python ARGS`` in the copy (its code, its stack.json)."""
        return run_python(list(args), cwd=self.root, env=self.env, timeout=timeout)


def docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed: {proc.stderr}")
    return proc


def run_python(args: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def remove_stale_projects() -> None:
    """Remove what an interrupted run left on the engine: its containers would come back with the
    engine (restart: unless-stopped), holding CPU and memory."""
    for kind in ("container", "network", "volume"):
        listing = docker(kind, "ls", *(["-a"] if kind == "container" else []), "--filter",
                         f"name={PROJECT_PREFIX}", "-q", check=False).stdout.split()
        if listing:
            docker(kind, "rm", *(["-f"] if kind != "network" else []), *listing, check=False)


def _ignore(directory: str, names: list[str]) -> set[str]:
    """What a clone would not have: caches, secrets, and the model repository's models (user data)."""
    ignored = set(COPY_IGNORE(directory, names))
    if Path(directory) == REPO_ROOT / "models":
        ignored |= {n for n in names if n != "README.md"}
    return ignored


def copy_checkout(dest: Path, cpu_stack_repo: Path) -> None:
    shutil.copytree(REPO_ROOT, dest, ignore=_ignore)
    models = dest / "models"
    for entry in cpu_stack_repo.iterdir():
        if entry.is_dir() and entry.name != EXPORTED_IN_CONTAINER:
            shutil.copytree(entry, models / entry.name, ignore=shutil.ignore_patterns(".lock"))


@contextlib.contextmanager
def running_stack(root: Path, cpu_stack_repo: Path, project: str, **env_values: str) -> Iterator[Stack]:
    """``make up IMAGES=local`` in a copy of the checkout at ``root`` (models from ``cpu_stack_repo``), as compose
    project ``project`` on free ports, with ``env_values`` added to its environment; ``down -v`` at the end."""
    remove_stale_projects()
    copy_checkout(root, cpu_stack_repo)
    secrets = init_secrets(root / "gateway" / "secrets")
    ports = {name: free_port() for name in ("GATEWAY_GRPC_PORT", "GATEWAY_REST_PORT", "GATEWAY_MTLS_PORT",
                                             "PROMETHEUS_PORT")}
    # Grafana is not started; Compose still interpolates its required password in every command.
    env = with_grafana_placeholder({**{k: v for k, v in os.environ.items()
                                       if k not in ("HOST_UID", "HOST_GID", "GRAFANA_ADMIN_PASSWORD")},
                                    "COMPOSE_PROJECT_NAME": project, **env_values,
                                    **{k: str(v) for k, v in ports.items()}})
    # What make up gives compose (HOST_UID/HOST_GID, CPU limits capped to this host), for the tests'
    # own compose commands.
    env = plan_compose("compose-cpu", "local", root, env, os.getuid(), os.getgid()).env
    made = Stack(root, env, secrets, ports["GATEWAY_GRPC_PORT"], ports["GATEWAY_REST_PORT"],
                 ports["GATEWAY_MTLS_PORT"], ports["PROMETHEUS_PORT"], "")
    try:
        proc = made.make_up()
        made.up_output = proc.stdout + proc.stderr
        if proc.returncode != 0:
            logs = made.compose("logs", "--no-color", "--tail", "60", check=False)
            raise AssertionError(f"make up IMAGES=local failed ({proc.returncode}):\n{made.up_output}\n"
                                 f"{logs.stdout[-6000:]}")
        yield made
    finally:
        made.compose("down", "-v", "--remove-orphans", "--timeout", "20", check=False)
