"""``make up``: run the stack with what this host has.

- A Docker engine answers and lists the ``nvidia`` runtime → the compose
  stack on the GPU (``docker-compose.yml``, with the ``gpu-metrics`` profile).
- A Docker engine answers without it → the CPU variant
  (``docker-compose.yml`` + ``docker-compose.cpu.yml``).
- No engine → the embedded server (``python -m serving.server``) with the
  CPU variant's ``tfserving`` command read from the compose files, paths
  remapped to this checkout (``serving.config.compose.plan_embedded_server``).

The embedded stack serves what is in the model repository, from a
persistent models config (``<work dir>/models.config``):

- The first start creates it from the repository: every model directory
  with a numeric version serves its newest version, ``stable`` and
  ``canary`` on it. Later starts keep it as it is (models added with
  ``python -m serving.config add`` and the rollout's versions and labels
  survive), except that a model new in the repository is added, unless
  ``serving.config remove`` took it out (``stack.json`` remembers), and a
  model whose directory has no version left is dropped.
- Zoo models are exported only when the repository is empty, and then only
  the small ones (:data:`DEFAULT_EXPORTS`); ``--models`` names the zoo models
  to export when missing (``all``: every one the CPU can serve).
- The server starts at once with the models already there; each export
  (smallest first) is added through ``HandleReloadConfigRequest`` when it is
  published, so the first model answers while the others export. Progress
  goes to stdout: each export, and each model as it becomes AVAILABLE.

The compose stack is reached through its ``gateway`` (TLS and API keys):
without the files of ``make certs`` it refuses before starting anything.
Its containers run as the invoking user (``HOST_UID``/``HOST_GID``; exported
values win); as root, as :data:`NON_ROOT_ID`, which gets the host files the
stack writes and the gateway's keys (:func:`host_paths`). ``--images local``
runs the stand-in images of ``make images`` (``docker-compose.local.yml``):
the CPU stack, only the services that have a local image.

Every backend records what it started in ``<work dir>/stack.json``
(``serving.config.stack``), which ``serving.config add|remove`` and
``serving.rollout`` default to. It says which backend it chose and why, and
how to call the server. Flags use the project's CLI vocabulary: ``--grpc
HOST:PORT`` / ``--rest URL`` (where the embedded server listens; their ports
are used), ``--model-repo DIR``. Default paths are anchored on the checkout,
not the current directory.
"""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Sequence

from serving.addresses import grpc_address, rest_address
from serving.config import load_model_server_config
from serving.config.compose import (
    COMPOSE_FILES,
    GRAFANA_PASSWORD,
    LOCAL_OVERRIDE,
    ComposeError,
    compose_command,
    load_compose_model,
    plan_embedded_server,
    read_dotenv,
    service_models_config,
    volume_map,
    with_grafana_placeholder,
)
from serving.config.edit import add_steps, without_model
from serving.config.models import (
    CONTAINER_MODELS_DIR,
    new_model_server_config,
    repository_models,
    served_entry,
    write_model_server_config,
)
from serving.config.reload import ReloadError
from serving.config.stack import (
    DEFAULT_WORK_DIR,
    STATE_FILE,
    ServedConfig,
    StackState,
    apply_steps,
    read_state,
    write_state,
)
from serving.model_repo import SMALL_ZOO, ZOO, model_versions
from serving.server.launcher import REPO_ROOT, ServerProcess, model_available, port_open
from serving.stack.docker import image_present, probe_engine

if TYPE_CHECKING:  # tensorflow_serving's protos load only when a config is read
    from tensorflow_serving.config.model_server_config_pb2 import ModelServerConfig

__all__ = ["Choice", "docker_runtimes", "choose_backend", "compose_files", "compose_profiles",
           "NON_ROOT_ID", "ContainerUser", "container_user", "is_local_service", "with_dependencies",
           "ComposePlan", "plan_compose", "cpu_limits", "missing_local_images", "HostPath", "host_paths", "prepare_host_paths",
           "missing_gateway_files", "missing_models", "ensure_commands", "DEFAULT_EXPORTS", "zoo_selection",
           "export_order", "prepare_served_config", "build_parser", "main"]

# The zoo models a fresh (empty) model repository gets, smallest first; the others are opt-in (--models).
DEFAULT_EXPORTS = SMALL_ZOO  # the zoo table says which models are small
# The persistent models config of the embedded stack, in the work directory.
MODELS_CONFIG = "models.config"
EMBEDDED_HEADER = """\
# The models the embedded stack serves (make up; TF Serving's ModelServerConfig text format).
# Created from the model repository on the first start and kept across restarts: change it with
# `python -m serving.config add|remove` and `python -m serving.rollout`, which also push it to the
# running server. make up adds models new in the repository (not those `remove` took out).
"""
GATEWAY_SECRETS_TARGET = "/etc/nginx/secrets"


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


def missing_gateway_files(services: dict) -> list[Path]:
    """Host files the ``gateway`` service mounts from ``make certs``'s folder that do not exist."""
    return [source for source in _gateway_secret_files(services.get("gateway", {})) if not source.exists()]


def _gateway_secret_files(gateway: Mapping) -> list[Path]:
    """The host files of ``make certs`` the ``gateway`` service mounts (under /etc/nginx/secrets)."""
    return [source for target, source in volume_map(gateway).items()
            if target.startswith(GATEWAY_SECRETS_TARGET + "/")]


def missing_models(models_config: Path, model_repo: Path) -> list[str]:
    """Models of ``models_config`` without any numeric version in ``model_repo``."""
    config = load_model_server_config(models_config)
    return [e.name for e in config.model_config_list.config if not model_versions(Path(model_repo) / e.name)]


def ensure_commands(model_repo: Path, names: Sequence[str],
                    batching_config: Optional[Path] = None) -> list[list[str]]:
    """Exporter commands exporting version 1 of each published name in ``names``, one per variant.

    ``batching_config`` is the serving batching file, whose ``allowed_batch_sizes``
    the exporter's warmup requests cover (as the compose exporter service does).
    """
    by_name = {m.name: m for m in ZOO}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"not published names of the zoo: {', '.join(unknown)}")
    variants: dict[str, list[str]] = {}
    for name in names:
        variants.setdefault(by_name[name].variant, []).append(by_name[name].model)
    batching = [f"--batching-config={batching_config}"] if batching_config else []
    return [[sys.executable, "-m", "exporter", "ensure", "--quiet", *batching, "--model-repo", str(model_repo),
             "--variant", variant, *models] for variant, models in variants.items()]


# --- the compose path ---------------------------------------------------------------------------------

# The uid and gid the containers run as when make up runs as root: the exporter image's own user
# (exporter/Dockerfile's `useradd --uid 10001`, also the Kubernetes pods' runAsUser). No container runs
# as root, so make up hands it the host files the stack writes and reads (prepare_host_paths).
NON_ROOT_ID = 10001
# Names of the stand-in images of docker-compose.local.yml (built by `make images`).
LOCAL_IMAGE_PREFIX = "tfs-stack-local/"
IMAGES = ("upstream", "local")


@dataclass(frozen=True)
class ContainerUser:
    """The ``HOST_UID``/``HOST_GID`` compose gets, and why."""

    uid: int
    gid: int
    reason: str

    def env(self) -> dict[str, str]:
        return {"HOST_UID": str(self.uid), "HOST_GID": str(self.gid)}


def container_user(environ: Mapping[str, str], uid: int, gid: int) -> ContainerUser:
    """``HOST_UID``/``HOST_GID`` for a ``make up`` run by ``uid:gid`` with the environment ``environ``.

    Exported ``HOST_UID``/``HOST_GID`` win (each on its own); else the invoking user's ids, so the
    exporter's files in the model repository and the 0600 keys of ``make certs`` stay that user's;
    as root, :data:`NON_ROOT_ID` for both. ValueError when an exported value is not a number, or
    ``HOST_UID`` is 0: no container runs as root.
    """
    exported = {}
    for name in ("HOST_UID", "HOST_GID"):
        value = environ.get(name, "").strip()
        if value:
            if not value.isdigit():
                raise ValueError(f"{name}={value!r}: must be a numeric id")
            exported[name] = int(value)
    if exported.get("HOST_UID") == 0:
        raise ValueError("HOST_UID=0: no container of the stack runs as root; unset it or name a non-root uid")
    if uid == 0:
        own, why = (NON_ROOT_ID, NON_ROOT_ID), (f"make up runs as root and no container does: {NON_ROOT_ID}, "
                                                "the exporter image's own user, owns the files they use")
    else:
        own, why = (uid, gid), "the invoking user, so the files they write and read stay yours"
    ids = (exported.get("HOST_UID", own[0]), exported.get("HOST_GID", own[1]))
    if exported:
        why = f"{' and '.join(exported)} from the environment" + ("" if len(exported) == 2 else f"; {why}")
    return ContainerUser(*ids, why)


def is_local_service(service: Mapping) -> bool:
    """Whether a service of the merged model runs on a local stand-in: its image has a
    :data:`LOCAL_IMAGE_PREFIX` name, or it is built here from such base images (``*IMAGE`` build args)."""
    return bool(_local_images(service)) and all(i.startswith(LOCAL_IMAGE_PREFIX) for i in _local_images(service))


def _local_images(service: Mapping) -> list[str]:
    """The images a service needs on the engine: its base images (``*IMAGE`` build args) when it is
    built here, else its ``image``."""
    build = service.get("build")
    if build:
        return [str(v) for k, v in (build.get("args") or {}).items() if k.upper().endswith("IMAGE") and v]
    return [service["image"]] if service.get("image") else []


def with_dependencies(services: Mapping[str, Mapping], names: Sequence[str]) -> list[str]:
    """``names`` and every service they depend on (``depends_on``, transitively), in model order."""
    wanted, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo += list((services[name].get("depends_on") or {}))
    return [n for n in services if n in wanted]


@dataclass(frozen=True)
class ComposePlan:
    """What ``make up`` runs on a compose backend: the files, the services, the environment."""

    backend: str
    files: list[Path]
    profiles: list[str]
    services: dict  # every service the files define (with the profiles that are on), compose model
    named: list[str]  # the services the command names (empty: compose starts them all)
    started: list[str]  # what comes up: the named services and their dependencies
    user: ContainerUser
    env: dict[str, str]  # the environment compose runs with
    notes: list[str]

    def command(self) -> list[str]:
        cmd = [*compose_command()]
        for path in self.files:
            cmd += ["-f", str(path)]
        for profile in self.profiles:
            cmd += ["--profile", profile]
        return cmd + ["up", "-d", "--build", "--wait", *self.named]


def plan_compose(backend: str, images: str, root: Path, environ: Mapping[str, str],
                 uid: int, gid: int) -> ComposePlan:
    """The compose run of ``backend`` on ``images`` (``upstream`` or ``local``) for user ``uid:gid``.

    ``local`` adds :data:`~serving.config.compose.LOCAL_OVERRIDE`, stays on the CPU files (the stand-ins are CPU-only) and names
    only the services with a local image. Raises ValueError for HOST_UID/HOST_GID
    (:func:`container_user`), ComposeError when compose rejects the files.
    """
    user = container_user(environ, uid, gid)
    notes = []
    if images == "local":
        if backend == "compose-gpu":
            notes.append("--images local: the local stand-ins are CPU-only; running the CPU compose files "
                         "on this GPU host")
            backend = "compose-cpu"
        files = compose_files(backend, root) + [root / LOCAL_OVERRIDE]
        profiles, model_profiles = [], "*"  # every service, to say which ones have no local image
    else:
        files, profiles = compose_files(backend, root), compose_profiles(backend)
        model_profiles = ",".join(profiles)
    limits = cpu_limits(root, environ, os.cpu_count())
    if limits:
        notes.append(f"this host has {os.cpu_count()} CPUs: " + ", ".join(f"{k}={v}" for k, v in limits.items())
                     + " (.env asks for more; export a value to choose)")
    env = {**environ, **limits, **user.env()}
    model_env = {**with_grafana_placeholder(env), "COMPOSE_PROFILES": model_profiles}
    services = load_compose_model(files, env=model_env, project_dir=root)["services"]
    named = [n for n, s in services.items() if is_local_service(s)] if images == "local" else []
    started = with_dependencies(services, named) if named else list(services)
    if images == "local":
        skipped = [n for n in services if n not in started]
        notes.append(f"--images local: starting {', '.join(started)}"
                     + (f"; no local image for {', '.join(skipped)} (not started)" if skipped else ""))
    if "grafana" not in started:
        env = with_grafana_placeholder(env)
    return ComposePlan(backend, files, profiles, services, named, started, user, env, notes)


def cpu_limits(root: Path, environ: Mapping[str, str], cpus: Optional[int]) -> dict[str, str]:
    """``.env``'s ``*_CPUS`` limits that exceed this host's ``cpus``, capped to it (Docker refuses to
    create a container whose CPU limit exceeds the host's). A value exported in ``environ`` is kept."""
    capped = {}
    for name, value in read_dotenv(root).items():
        if name.endswith("_CPUS") and name not in environ and cpus:
            try:
                if float(value) > cpus:
                    capped[name] = str(cpus)
            except ValueError:
                continue
    return capped


def missing_local_images(plan: ComposePlan, docker: str = "docker") -> list[str]:
    """The local images the started services need that the engine does not have (``docker image inspect``)."""
    needed = dict.fromkeys(i for n in plan.started for i in _local_images(plan.services[n])
                           if i.startswith(LOCAL_IMAGE_PREFIX))
    return [image for image in needed if not image_present(image, docker)]


@dataclass(frozen=True)
class HostPath:
    """A host path a started service uses: created when missing (a directory), chowned when root."""

    path: Path
    uid: Optional[int]  # the service's user; None when its `user` is not numeric
    gid: Optional[int]
    directory: bool  # a directory written by the service (chowned recursively) or a file it reads


def _service_ids(service: Mapping) -> tuple[Optional[int], Optional[int]]:
    uid, _, gid = str(service.get("user") or "").partition(":")
    return (int(uid) if uid.isdigit() else None, int(gid) if gid.isdigit() else None)


def host_paths(plan: ComposePlan, root: Path) -> list[HostPath]:
    """The host paths the started services need owned by their user (when ``make up`` runs as root).

    - Every bind mount source of a started service that is under the checkout and not read-only,
      a directory or missing: the model repository the exporter writes, the GPU services' CUDA cache
      (``create_host_path: false``: Docker would make it root's, so compose refuses a missing one and
      make up creates it). Chowned recursively: the exporter stages each version inside the model's
      own directory.
    - The gateway's mounted secrets of ``make certs`` (server.key, ...): chowned, not made
      world-readable (chmod o+r), because the keys must stay unreadable to the host's other users.
    """
    paths: dict[Path, HostPath] = {}
    for name in plan.started:
        service = plan.services[name]
        ids = _service_ids(service)
        for volume in service.get("volumes", []):
            source = Path(volume.get("source") or "")
            if (volume.get("type") == "bind" and not volume.get("read_only") and source.is_relative_to(root)
                    and (source.is_dir() or not source.exists())):
                paths.setdefault(source, HostPath(source, *ids, True))
    if "gateway" in plan.started:
        ids = _service_ids(plan.services["gateway"])
        for source in _gateway_secret_files(plan.services["gateway"]):
            paths.setdefault(source, HostPath(source, *ids, False))
    return list(paths.values())


def prepare_host_paths(paths: Sequence[HostPath], *, as_root: bool, dry_run: bool = False) -> list[str]:
    """Create the missing directories of ``paths``; as root, chown each to its service's user.
    What was done (``dry_run``: what would be), one line each."""
    done = []
    for item in paths:
        if item.directory and not item.path.exists():
            if not dry_run:
                item.path.mkdir(parents=True)
            done.append(f"create {item.path}")
        if as_root and item.uid is not None and (item.path.exists() or dry_run):
            if not dry_run:
                for path in _tree(item.path) if item.directory else [item.path]:
                    os.chown(path, item.uid, -1 if item.gid is None else item.gid, follow_symlinks=False)
            done.append(f"chown {item.uid}:{'' if item.gid is None else item.gid} {item.path}"
                        + (" (recursively)" if item.directory else ""))
    return done


def _tree(top: Path) -> list[Path]:
    """``top`` and everything under it, not following symbolic links."""
    out = [top]
    for dirpath, dirnames, filenames in os.walk(top):
        out += [Path(dirpath, n) for n in (*dirnames, *filenames)]
    return out


def _run_compose(args: argparse.Namespace, choice: Choice, root: Path) -> int:
    try:
        plan = plan_compose(choice.backend, args.images, root, os.environ, os.getuid(), os.getgid())
    except ValueError as exc:
        print(f"make up: {exc}", file=sys.stderr)
        return 2
    for note in plan.notes:
        print(f"make up: {note}", flush=True)
    print(f"make up: containers run as {plan.user.uid}:{plan.user.gid} (HOST_UID/HOST_GID): {plan.user.reason}",
          flush=True)
    as_root, paths = os.getuid() == 0, host_paths(plan, root)
    shown = {**plan.user.env(), **{k: v for k, v in plan.env.items() if os.environ.get(k) != v}}
    command = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in shown.items()), shlex.join(plan.command())])
    if args.dry_run:
        for line in prepare_host_paths(paths, as_root=as_root, dry_run=True):
            print(f"make up: would {line}", flush=True)
        print("+", command, flush=True)
        return 0
    problem = _compose_problem(plan, args.docker)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    for line in prepare_host_paths(paths, as_root=as_root):
        print(f"make up: {line}", flush=True)
    print("+", command, flush=True)
    code = subprocess.run(plan.command(), cwd=root, env=plan.env).returncode
    if code == 0:
        _write_compose_state(plan, args.work_dir.resolve() / STATE_FILE)
        _print_gateway_usage(plan)
    return code


def _compose_problem(plan: ComposePlan, docker: str) -> Optional[str]:
    """Why the planned compose run cannot start (and what to do), or None."""
    if "grafana" in plan.started and not os.environ.get(GRAFANA_PASSWORD):
        return (f"{GRAFANA_PASSWORD} is not set; the stack has no default Grafana password.\n"
                f"  export {GRAFANA_PASSWORD}='<a password>' && make up")
    missing = missing_gateway_files(plan.services) if "gateway" in plan.started else []
    if missing:
        return ("the gateway's certificates and API keys are missing: "
                f"{', '.join(str(p) for p in missing)}\n  make certs && make up")
    images = missing_local_images(plan, docker) if any(f.name == LOCAL_OVERRIDE for f in plan.files) else []
    if images:
        return f"local images missing: {', '.join(images)}\n  make images && make up IMAGES=local"
    return None


def _write_compose_state(plan: ComposePlan, state_file: Path) -> None:
    """stack.json of a compose run: its models config, the gateway's addresses, the CA and admin key."""
    tfserving, gateway = plan.services["tfserving"], plan.services["gateway"]
    model_repo = volume_map(tfserving)[CONTAINER_MODELS_DIR]
    secrets = _gateway_secrets(gateway)
    old = read_state(state_file)
    write_state(StackState(plan.backend, service_models_config(tfserving), _address(gateway, 8500),
                           f"https://{_address(gateway, 8501)}", model_repo, {CONTAINER_MODELS_DIR: model_repo},
                           removed=old.removed if old else (), root_certificates=secrets / "ca.crt",
                           admin_key_file=secrets / "admin.api-key"), state_file)


def _address(service: dict, target: int) -> str:
    """``HOST:PORT`` where a compose service publishes container port ``target`` (any address: 127.0.0.1)."""
    port = next(p for p in service.get("ports", []) if p["target"] == target)
    host = port.get("host_ip") or "127.0.0.1"
    return f"{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{int(port['published'])}"


def _port(address: str) -> int:
    """The port of ``HOST:PORT`` or of a URL ``http://HOST:PORT``."""
    port = urllib.parse.urlsplit(address if "//" in address else f"//{address}").port
    if port is None:
        raise SystemExit(f"no port in {address!r}")
    return port


def zoo_selection(spec: Optional[str]) -> list[str]:
    """The published zoo names ``--models`` asks for: ``all`` (every one the CPU serves) or a comma list."""
    servable = [m.name for m in ZOO if not m.gpu_only]
    if spec is None:
        return []
    if spec.strip() == "all":
        return servable
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in servable]
    if unknown:
        raise ValueError(f"--models: not zoo models the embedded server can serve: {', '.join(unknown)} "
                         f"(choose from: {', '.join(servable)}, or all)")
    return names


def export_order(names: Sequence[str]) -> list[str]:
    """``names`` smallest first: the default exports, then fp32 models, then the variants (zoo order)."""
    index = {m.name: i for i, m in enumerate(ZOO)}
    variant = {m.name: m.variant for m in ZOO}
    return sorted(dict.fromkeys(names), key=lambda n: (n not in DEFAULT_EXPORTS, variant.get(n) != "fp32",
                                                       DEFAULT_EXPORTS.index(n) if n in DEFAULT_EXPORTS
                                                       else index.get(n, len(index))))


def prepare_served_config(path: Path, model_repo: Path, *, removed: Sequence[str] = (),
                          log: Callable[[str], None] = print) -> Optional[ModelServerConfig]:
    """The persistent served config at ``path``, brought up to date with ``model_repo`` (module doc).

    Written only when it changes. None, after logging why, when a model
    names a version that is not on disk (the server would wait for it).
    """
    served = ServedConfig(path, "", {})
    if path.is_file():
        config = load_model_server_config(path)
        config.model_config_list.SetInParent()
        changed = False
    else:
        config, changed = new_model_server_config(), True
        config.model_config_list.SetInParent()
        log(f"make up: creating {path} from the model repository {model_repo}")
    for entry in list(config.model_config_list.config):
        if not served.versions_on_disk(entry):
            log(f"make up: {entry.name}: no version under {entry.base_path} any more; no longer served")
            config, changed = without_model(config, entry.name), True
    configured = {e.name for e in config.model_config_list.config}
    for name in repository_models(model_repo):
        if name not in configured and name not in removed:
            newest = model_versions(model_repo / name)[-1]
            log(f"make up: {name}: found in the model repository; serving version {newest} (stable, canary)")
            served_entry(config, name, str(model_repo / name), newest)
            changed = True
    problems = served.problems(config)
    if problems:
        for problem in problems:
            log(f"make up: {path}: {problem}")
        log("make up: fix it with `python -m serving.config remove NAME` or by publishing the version")
        return None
    if changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_model_server_config(config, path, header=EMBEDDED_HEADER)
    return config


class Exports:
    """Zoo exports run one at a time in a subprocess each (``python -m exporter ensure``), in order.

    ``poll()`` returns the names whose export finished (and starts the next);
    a failed export is reported with its log tail and skipped.
    """

    def __init__(self, names: Sequence[str], model_repo: Path, batching: Optional[str], log_dir: Path,
                 root: Path, started: float) -> None:
        self.queue = list(names)
        self.total = len(names)
        self.model_repo, self.batching, self.log_dir, self.root = model_repo, batching, log_dir, root
        self.started = started
        self.current: Optional[tuple[str, subprocess.Popen, float]] = None
        self.failed: list[str] = []

    def _start_next(self) -> None:
        if self.current is not None or not self.queue:
            return
        name = self.queue.pop(0)
        (cmd,) = ensure_commands(self.model_repo, [name], self.batching)
        number = self.total - len(self.queue)
        _say(self.started, f"[{number}/{self.total}] exporting {name} into {self.model_repo}")
        with open(self.log_dir / f"export-{name}.log", "wb") as log:
            proc = subprocess.Popen(cmd, cwd=self.root, stdout=log, stderr=subprocess.STDOUT)
        self.current = (name, proc, time.monotonic())

    def poll(self) -> list[str]:
        self._start_next()
        if self.current is None or self.current[1].poll() is None:
            return []
        name, proc, began = self.current
        self.current = None
        number = self.total - len(self.queue)
        if proc.returncode == 0:
            _say(self.started, f"[{number}/{self.total}] {name} exported in {time.monotonic() - began:.0f} s")
            self._start_next()
            return [name]
        self.failed.append(name)
        tail = (self.log_dir / f"export-{name}.log").read_text(errors="replace").strip().splitlines()[-5:]
        _say(self.started, f"[{number}/{self.total}] exporting {name} failed (exit {proc.returncode}):\n    "
             + "\n    ".join(tail))
        self._start_next()
        return []

    def busy(self) -> bool:
        return self.current is not None or bool(self.queue)

    def terminate(self) -> None:
        """Stop exporting: no next export, SIGTERM to the running one (does not wait)."""
        self.queue.clear()
        if self.current is not None:
            self.current[1].terminate()

    def stop(self) -> None:
        """``terminate()`` and wait for the running export to exit."""
        self.terminate()
        if self.current is not None:
            self.current[1].wait()
            self.current = None


def _say(started: float, message: str) -> None:
    print(f"make up [{time.monotonic() - started:5.0f} s] {message}", flush=True)


def _to_export(args: argparse.Namespace, model_repo: Path, old: Optional[StackState]) -> list[str]:
    """The zoo models this start exports: ``--models`` (or the defaults in an empty repository),
    plus what an interrupted start left, minus what is there already."""
    wanted = zoo_selection(args.models)
    if args.models is None and not repository_models(model_repo):
        wanted = list(DEFAULT_EXPORTS)
    wanted += list(old.exporting) if old is not None else []
    return export_order([n for n in wanted if not model_versions(model_repo / n)])


def _run_embedded(args: argparse.Namespace, root: Path) -> int:
    started = time.monotonic()
    # Only tfserving's command is read here: Grafana's password may be a placeholder.
    service = load_compose_model(compose_files("embedded", root), services=["tfserving"],
                                 env=with_grafana_placeholder(os.environ), project_dir=root)["services"]["tfserving"]
    model_repo, work_dir = args.model_repo.resolve(), args.work_dir.resolve()
    model_repo.mkdir(parents=True, exist_ok=True)
    state_file = work_dir / STATE_FILE
    old = read_state(state_file)
    try:
        requested, to_export = zoo_selection(args.models), _to_export(args, model_repo, old)
    except ValueError as exc:
        print(f"make up: {exc}", file=sys.stderr)
        return 2
    # Asking for a model again (--models, or exporting it) takes back its removal.
    removed = tuple(n for n in (old.removed if old else ()) if n not in requested and n not in to_export)
    config = prepare_served_config(work_dir / MODELS_CONFIG, model_repo, removed=removed)
    if config is None:
        return 1
    # The launcher sets --port/--rest_api_port from --grpc/--rest; the compose values are dropped.
    plan = plan_embedded_server(service, work_dir=work_dir, models_dir=model_repo,
                                models_config=work_dir / MODELS_CONFIG,
                                overrides={"port": None, "rest_api_port": None})
    state = StackState("embedded", plan.models_config, args.grpc, args.rest, model_repo, {}, removed,
                       tuple(to_export), os.getpid())
    write_state(state, state_file)
    names = [e.name for e in config.model_config_list.config]
    _say(started, f"serving {', '.join(names) or 'no model yet'} from {plan.models_config}"
         + (f"; exporting {', '.join(to_export)} (smallest first; each is served once exported)"
            if to_export else ""))
    server = ServerProcess(plan.args, grpc_port=_port(args.grpc), rest_port=_port(args.rest),
                           capture_output=False, timeout=args.timeout)
    print("+", " ".join(server.command), flush=True)
    server.launch()
    batching = next((a.split("=", 1)[1] for a in plan.args if a.startswith("--batching_parameters_file=")), None)
    exports = Exports(to_export, model_repo, batching, work_dir, root, started)
    stopping = threading.Event()

    def stop(*_: object) -> None:
        """Stop the export under way and the server (it drains and exits); a reload being waited for ends."""
        if not stopping.is_set():
            stopping.set()
            exports.terminate()
            server.proc.send_signal(signal.SIGTERM)

    # `kill` of make up stops the server too (Ctrl-C reaches both through the terminal).
    signal.signal(signal.SIGTERM, stop)
    try:
        code = _serve(args, server, exports, ServedConfig(plan.models_config, args.grpc, {}, state_file),
                      names, stopping, started)
    except KeyboardInterrupt:
        stop()
        code = None
    exports.stop()
    return server.wait() if code is None else code


def _serve(args: argparse.Namespace, server: ServerProcess, exports: Exports, served: ServedConfig,
           names: Sequence[str], stopping: threading.Event, started: float) -> Optional[int]:
    """Report the startup models as they become AVAILABLE, then add each export once it is published;
    then wait. The server's exit status, or None when stopped (SIGTERM) first."""
    deadline = started + args.timeout
    loading, exported, announced = list(names), [], False
    while not stopping.is_set():
        if not server.running():
            return server.wait()
        exported += exports.poll()
        if loading:
            loading = _report_available(args.rest, loading, started)
            if loading and time.monotonic() > deadline:
                print(f"make up: models not AVAILABLE after {args.timeout:.0f} s: {', '.join(loading)}",
                      file=sys.stderr)
                loading = []
        elif exported and port_open(_port(args.grpc)):
            _add_exported(served, exported.pop(0), started, args.timeout)
        elif not exported:
            served_names = [e.name for e in served.load().model_config_list.config]
            if not announced and served_names:
                _print_usage(args.grpc, args.rest, served_names[0], model_repo=args.model_repo.resolve(),
                             work_dir=args.work_dir.resolve())
                announced = True
            if not exports.busy():
                _say(started, "every model is loaded" + (f"; exports failed: {', '.join(exports.failed)}"
                                                         if exports.failed else ""))
                break
        stopping.wait(0.25)
    while not stopping.wait(0.5):
        if not server.running():
            return server.wait()
    return None


def _report_available(rest: str, loading: Sequence[str], started: float) -> list[str]:
    """``loading`` without the models that are AVAILABLE now, each reported once."""
    pending = []
    for name in loading:
        if model_available(rest, name, timeout=1.0):
            _say(started, f"{name} AVAILABLE")
        else:
            pending.append(name)
    return pending


def _add_exported(served: ServedConfig, name: str, started: float, timeout: float) -> None:
    """Serve a model the exporter just published (its newest version, stable and canary on it), the way
    ``serving.config add`` does, and drop it from the state's pending exports."""
    state = read_state(served.state_file)
    config = served.load()
    model_dir = state.model_repo / name
    if not any(e.name == name for e in config.model_config_list.config):
        on_disk = model_versions(model_dir)
        entry = served_entry(new_model_server_config(), name, str(model_dir), on_disk[-1])
        try:
            apply_steps(served, name, add_steps(config, entry, on_disk), timeout=timeout, log=lambda _: None)
        except ReloadError as exc:
            _say(started, f"{name} not served: {exc}")
            return
        _say(started, f"{name} AVAILABLE")
    write_state(state.replace(exporting=tuple(n for n in state.exporting if n != name)), served.state_file)


def _gateway_secrets(gateway: dict) -> Path:
    """The host folder of ``make certs``'s files that the ``gateway`` service mounts."""
    return _gateway_secret_files(gateway)[0].parent


def _print_gateway_usage(plan: ComposePlan) -> None:
    """How to call the compose stack: through the gateway, with the CA and a key of ``make certs``;
    Grafana and Prometheus where they were started."""
    services = plan.services
    gateway, tfserving = services["gateway"], services["tfserving"]
    secrets = _gateway_secrets(gateway)
    model = load_model_server_config(service_models_config(tfserving)).model_config_list.config[0].name
    rest = f"https://{_address(gateway, 8501)}"
    dashboards = []
    if "grafana" in plan.started:
        dashboards.append(f"Grafana: http://{_address(services['grafana'], 3000)} (admin / $GRAFANA_ADMIN_PASSWORD)")
    if "prometheus" in plan.started:
        dashboards.append(f"Prometheus: http://{_address(services['prometheus'], 9090)}")
    print(f"""
Serving through the gateway: gRPC {_address(gateway, 8500)}, REST {rest} (TLS; API key or client certificate)
{', '.join(dashboards)}
  curl --cacert {secrets}/ca.crt -H "x-api-key: $(cat {secrets}/client.api-key)" {rest}/v1/models/{model}
  curl --cacert {secrets}/ca.crt --cert {secrets}/client.crt --key {secrets}/client.key \\
       https://{_address(gateway, 8443)}/v1/models/{model}
  README.md "Security": the SDK's root_certificates= and api_key=; reloads need {secrets}/admin.api-key
""", flush=True)


def _print_usage(grpc_target: str, rest: str, model: str, *, model_repo: Path,
                 work_dir: Path = DEFAULT_WORK_DIR, extra: str = "") -> None:
    work = "" if work_dir == DEFAULT_WORK_DIR else f" --work-dir {work_dir}"
    versions = model_versions(model_repo / model)
    manifest = model_repo / model / str(versions[-1]) / "manifest.json" if versions else None
    predict = (f"""  python -c 'from serving.client import GrpcClient; from exporter.manifest import load_manifest
print(GrpcClient("{grpc_target}").predict("{model}", load_manifest("{manifest.parent}").sample_inputs(), label="stable"))'
""" if manifest is not None and manifest.is_file() else "")
    print(f"""
Serving: gRPC {grpc_target}, REST {rest}{chr(10) + extra if extra else ''}
  curl {rest}/v1/models/{model}
  curl {rest}/v1/models/{model}/metadata
  curl {rest}/monitoring/prometheus/metrics
  python -m serving.client --grpc {grpc_target} --model {model} --label stable status
  python -m serving.client --grpc {grpc_target} --model {model} --label stable metadata
{predict}  python -m serving.rollout status --model {model}{work}
  python -m serving.config add NAME --base-path {model_repo}/NAME{work}
""", flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m serving.up", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("auto", "compose-gpu", "compose-cpu", "embedded"), default="auto",
                        help="force a backend (default: auto, from `docker info`)")
    parser.add_argument("--docker", default="docker", help="docker CLI to ask (default: docker)")
    parser.add_argument("--images", choices=IMAGES, default="upstream",
                        help="compose: `local` runs the stand-in images of `make images` "
                             "(docker-compose.local.yml; the CPU stack without Grafana and dcgm-exporter); "
                             "default: upstream")
    parser.add_argument("--model-repo", type=Path, default=REPO_ROOT / "models", metavar="DIR",
                        help="model repository (default: <checkout>/models)")
    parser.add_argument("--models", metavar="NAMES",
                        help="embedded server: zoo models to export when missing, comma-separated published "
                             "names (digits,resnet50,digits_xla,...) or `all` (default: "
                             f"{','.join(DEFAULT_EXPORTS)} when there is no model yet, else none)")
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR,
                        help="where the stack's state (stack.json) and the embedded server's persistent "
                             f"models config live (default: {DEFAULT_WORK_DIR})")
    parser.add_argument("--grpc", metavar="HOST:PORT", default="127.0.0.1:8500", type=grpc_address,
                        help="embedded server: its gRPC address; it listens on this port (default: 127.0.0.1:8500)")
    parser.add_argument("--rest", metavar="URL", default="http://127.0.0.1:8501", type=rest_address,
                        help="embedded server: its REST URL; it listens on this port (default: http://127.0.0.1:8501)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the models to load")
    parser.add_argument("--dry-run", action="store_true",
                        help="say what would run (compose: the command and HOST_UID/HOST_GID), run nothing")
    return parser


def main(argv: Optional[Sequence[str]] = None, root: Path = REPO_ROOT) -> int:
    args = build_parser().parse_args(argv)
    if args.backend == "auto":
        choice = choose_backend(*docker_runtimes(args.docker))
    else:
        choice = Choice(args.backend, f"--backend {args.backend}")
    print(f"make up: {choice.backend}: {choice.reason}", flush=True)
    if choice.backend == "embedded" and args.images == "local":
        print("make up: --images local runs the compose stack on the images of `make images`, "
              "which needs a Docker engine", file=sys.stderr)
        return 2
    if args.dry_run and choice.backend == "embedded":
        return 0
    try:
        return _run_embedded(args, root) if choice.backend == "embedded" else _run_compose(args, choice, root)
    except ComposeError as exc:
        print(f"make up: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
