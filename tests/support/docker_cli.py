"""A stand-in ``docker`` CLI for the make up tests (no engine can run the stack here), and their environment."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

__all__ = ["SECRETS", "CPU_ENGINE", "READ_FROM_ENV", "fake_docker_cli", "environ", "set_environ"]

SECRETS = ["server.crt", "server.key", "ca.crt", "api-keys.map"]  # what the gateway service mounts


# `docker info` of an engine without the NVIDIA runtime.
CPU_ENGINE = """echo '{"io.containerd.runc.v2":{"path":"runc"},"runc":{"path":"runc"}}'"""


def fake_docker_cli(directory: Path, calls: Path, *, images: bool = True) -> Path:
    """A stand-in `docker` in ``directory`` (no engine can run the stack here): it answers `info` like a
    CPU engine, `image inspect` as if the images exist (``images``) or not, passes `compose config` and
    `compose version` to the real Compose binary, and appends any other `compose` call to ``calls``."""
    from serving.config.compose import compose_command

    real_compose = " ".join(compose_command())
    fake = directory / "docker"
    directory.mkdir(parents=True, exist_ok=True)
    fake.write_text(f"""#!/bin/sh
case "$1" in
  info) {CPU_ENGINE} ;;
  image) [ "$2" = inspect ] && {'exit 0' if images else 'echo "Error: No such image: $4" >&2; exit 1'} ;;
  compose)
    shift
    case " $* " in
      *" version "*) exit 0 ;;
      *" config "*) exec {real_compose} "$@" ;;
      *) echo "$*" >> {calls}; exit 0 ;;
    esac ;;
  *) exit 64 ;;
esac
""")
    fake.chmod(0o755)
    return fake


# What make up and Compose read from the environment; the tests set them themselves.
READ_FROM_ENV = ("HOST_UID", "HOST_GID", "GRAFANA_ADMIN_PASSWORD", "COMPOSE_PROFILES", "GATEWAY_SECRETS_HOST_DIR",
                 "COMPOSE_FILE", "COMPOSE_PROJECT_NAME", "GATEWAY_GRPC_PORT", "GATEWAY_REST_PORT", "PROMETHEUS_PORT",
                 "TFS_CONFIG_HOST_DIR")


def environ(**extra: str) -> dict[str, str]:
    """The test's environment without what make up reads from it, plus ``extra``."""
    return {**{k: v for k, v in os.environ.items() if k not in READ_FROM_ENV}, **extra}


def set_environ(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    """The process environment of an in-process ``main()``: ``environ(**values)``."""
    for name in READ_FROM_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
