"""A model repository with every model the CPU stack serves (exports cached across runs)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import _cached_export


@pytest.fixture(scope="session")
def cpu_stack_repo(model_repo: Path, resnet50_repo: Path) -> Path:
    """digits, text, ranker, resnet50 (fp32) and digits_xla, resnet50_xla, version 1 each."""
    root = _cached_export(("digits", "resnet50"), variant="xla")
    assert root == model_repo == resnet50_repo
    return root


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
