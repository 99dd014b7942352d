"""The compose backends (``compose-gpu``, ``compose-cpu``): plan, preflight, start, record, stop.

The stack is reached through its ``gateway`` (TLS and API keys): without the
files of ``make certs`` it refuses before starting anything. Its containers
run as the invoking user (``HOST_UID``/``HOST_GID``; exported values win); as
root, as :data:`NON_ROOT_ID`, which gets the host files the stack writes and
the gateway's keys (:func:`host_paths`). ``--images local`` runs the stand-in
images of ``make images`` (``docker-compose.local.yml``): the CPU stack, only
the services that have a local image. ``stack.json`` records the compose
files, profiles and project, so :func:`compose_down` stops what was started.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from gateway.certs import write_grafana_password
from serving.config import load_model_server_config
from serving.config.compose import (
    GRAFANA_PASSWORD,
    LOCAL_OVERRIDE,
    compose_command,
    load_compose_model,
    read_dotenv,
    remap_server_args,
    service_models_config,
    volume_map,
    with_grafana_placeholder,
)
from serving.config.models import CONTAINER_MODELS_DIR
from serving.config.served_config import DEFAULT_WORK_DIR, StackState, read_state, write_state
from serving.stack.banner import batching_summary, print_gateway_usage
from serving.stack.choice import Choice, compose_files, compose_profiles
from serving.stack.docker import image_present
from serving.stack.scrape import scrape_config_for, write_scrape_config
from serving.stack.prepared_configs import prepare_compose_configs

__all__ = ["NON_ROOT_ID", "IMAGES", "CONFIG_DIR_VARIABLE", "COMPOSE_CONFIG_DIR", "recorded_env", "ContainerUser", "container_user", "is_local_service", "with_dependencies",
           "ComposePlan", "plan_compose", "cpu_limits", "missing_local_images", "HostPath", "host_paths",
           "prepare_host_paths", "missing_gateway_files", "run_compose", "compose_containers", "compose_down"]

# The uid and gid the containers run as when make up runs as root: the exporter image's own user
# (exporter/Dockerfile's `useradd --uid 10001`, also the Kubernetes pods' runAsUser). No container runs
# as root, so make up hands it the host files the stack writes and reads (prepare_host_paths).
NON_ROOT_ID = 10001
# Names of the stand-in images of docker-compose.local.yml (built by `make images`).
LOCAL_IMAGE_PREFIX = "tfs-stack-local/"
IMAGES = ("upstream", "local")
GATEWAY_SECRETS_TARGET = "/etc/nginx/secrets"
# The compose variable naming the host directory mounted as tfserving's /etc/tfserving, and where make up
# keeps it: the served models config (seeded once from serving/) and the other configs (from serving/).
CONFIG_DIR_VARIABLE = "TFS_CONFIG_HOST_DIR"
# The compose variable naming the Prometheus config make up renders for the services it starts.
PROMETHEUS_CONFIG_VARIABLE = "PROMETHEUS_CONFIG_HOST_FILE"
CONFIG_TARGET = "/etc/tfserving"
COMPOSE_CONFIG_DIR = "compose"


def missing_gateway_files(services: dict) -> list[Path]:
    """Host files the ``gateway`` service mounts from ``make certs``'s folder that do not exist."""
    return [source for source in _gateway_secret_files(services.get("gateway", {})) if not source.exists()]


def _gateway_secret_files(gateway: Mapping) -> list[Path]:
    """The host files of ``make certs`` the ``gateway`` service mounts (under /etc/nginx/secrets)."""
    return [source for target, source in volume_map(gateway).items()
            if target.startswith(GATEWAY_SECRETS_TARGET + "/")]


def _gateway_secrets(gateway: Mapping) -> Path:
    """The host folder of ``make certs``'s files that the ``gateway`` service mounts."""
    return _gateway_secret_files(gateway)[0].parent


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
    project: str = ""  # the compose project name (the files' `name`, or COMPOSE_PROJECT_NAME)

    def command(self) -> list[str]:
        return [*_compose_base(self.files, self.profiles), "up", "-d", "--build", "--wait", *self.named]


def _compose_base(files: Sequence[Path], profiles: Sequence[str], project: str = "") -> list[str]:
    cmd = [*compose_command()]
    for path in files:
        cmd += ["-f", str(path)]
    for profile in profiles:
        cmd += ["--profile", profile]
    return cmd + (["--project-name", project] if project else [])


def plan_compose(backend: str, images: str, root: Path, environ: Mapping[str, str],
                 uid: int, gid: int, *, config_dir: Optional[Path] = None) -> ComposePlan:
    """The compose run of ``backend`` on ``images`` (``upstream`` or ``local``) for user ``uid:gid``.

    ``local`` adds :data:`~serving.config.compose.LOCAL_OVERRIDE`, stays on the CPU files (the stand-ins are CPU-only) and names
    only the services with a local image. ``config_dir`` is the host directory tfserving reads its
    configs from (:data:`CONFIG_DIR_VARIABLE`; make up: ``<work dir>/compose``, default ``serving/``).
    Raises ValueError for HOST_UID/HOST_GID (:func:`container_user`), ComposeError when compose
    rejects the files.
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
    env = {**environ, **limits, **user.env(),
           **({CONFIG_DIR_VARIABLE: str(config_dir)} if config_dir is not None else {})}
    model_env = {**with_grafana_placeholder(env), "COMPOSE_PROFILES": model_profiles}
    model = load_compose_model(files, env=model_env, project_dir=root)
    services = model["services"]
    named = [n for n, s in services.items() if is_local_service(s)] if images == "local" else []
    started = with_dependencies(services, named) if named else list(services)
    if images == "local":
        skipped = [n for n in services if n not in started]
        notes.append(f"--images local: starting {', '.join(started)}"
                     + (f"; no local image for {', '.join(skipped)} (not started)" if skipped else ""))
    if "grafana" not in started:
        env = with_grafana_placeholder(env)
    return ComposePlan(backend, files, profiles, services, named, started, user, env, notes,
                       str(model.get("name") or ""))


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
            # access/ (api-keys.map, revoked-serials.map) is a folder: chowned with what is in it.
            paths.setdefault(source, HostPath(source, *ids, source.is_dir()))
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


def run_compose(choice: Choice, *, images: str, docker: str, state_file: Path, root: Path,
                dry_run: bool = False) -> int:
    """Plan, check and start the compose stack of ``choice``; record it in ``state_file``; print the banner."""
    config_dir = Path(state_file).parent / COMPOSE_CONFIG_DIR
    scrape_file = Path(state_file).parent / "prometheus" / "prometheus.yml"
    try:
        plan = plan_compose(choice.backend, images, root, {**os.environ, PROMETHEUS_CONFIG_VARIABLE: str(scrape_file)},
                            os.getuid(), os.getgid(), config_dir=config_dir)
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
    if dry_run:
        for line in prepare_host_paths(paths, as_root=as_root, dry_run=True):
            print(f"make up: would {line}", flush=True)
        print("+", command, flush=True)
        return 0
    problem = _compose_problem(plan, docker)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    if "grafana" in plan.started:  # compose's Grafana reads its password from a secret file, not the environment
        write_grafana_password(_gateway_secrets(plan.services["gateway"]), os.environ[GRAFANA_PASSWORD])
    for line in prepare_host_paths(paths, as_root=as_root):
        print(f"make up: {line}", flush=True)
    tfserving = plan.services["tfserving"]
    prepare_compose_configs(config_dir, root / "serving", tfserving.get("command") or [], CONFIG_TARGET)
    if "prometheus" in plan.started:
        every = set(plan_services_all_profiles(plan, root))
        write_scrape_config(scrape_config_for(plan.started, every, root / "monitoring/prometheus/prometheus.yml"),
                            scrape_file, root / "monitoring/prometheus/prometheus.yml")
    print("+", command, flush=True)
    code = _compose_up(plan, root, images)
    if code == 0:
        _write_compose_state(plan, state_file)
        _print_banner(plan, root, state_file)
    return code


# What compose prints when an image cannot be pulled because no registry answers (name lookups, refused
# connections, timeouts on the registry's address).
PULL_FAILURES = ("no such host", "registry-1.docker.io", "pull access denied", "failed to resolve reference",
                 "error pulling image", "Error response from daemon: Get \"https://", "i/o timeout",
                 "connection refused", "TLS handshake timeout")


def _compose_up(plan: ComposePlan, root: Path, images: str) -> int:
    """``compose up`` of ``plan``, its output on this terminal; a failed pull is explained."""
    proc = subprocess.Popen(plan.command(), cwd=root, env=plan.env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)
    pulled_failed = False
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        pulled_failed = pulled_failed or any(marker in line for marker in PULL_FAILURES)
    code = proc.wait()
    if code != 0 and pulled_failed and images != "local":
        print("make up: no registry answered, so the images could not be pulled. Build the local stand-ins "
              "and run on them:\n  make images && make up IMAGES=local", file=sys.stderr, flush=True)
    return code


def plan_services_all_profiles(plan: ComposePlan, root: Path) -> list[str]:
    """Every service the plan's files define, whatever profile it is under (dcgm-exporter too)."""
    model_env = {**with_grafana_placeholder(plan.env), "COMPOSE_PROFILES": "*"}
    return list(load_compose_model(plan.files, env=model_env, project_dir=root)["services"])


def recorded_env(state: StackState, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment to run compose with for the stack ``state`` records: ``environ`` with the variables
    make up set (HOST_UID/HOST_GID, the config directory, capped CPU limits) and a Grafana placeholder."""
    return with_grafana_placeholder({**environ, **state.compose_env})


def _compose_problem(plan: ComposePlan, docker: str) -> Optional[str]:
    """Why the planned compose run cannot start (and what to do), or None."""
    if "grafana" in plan.started and not os.environ.get(GRAFANA_PASSWORD):
        return (f"{GRAFANA_PASSWORD} is not set; the stack has no default Grafana password.\n"
                f"  export {GRAFANA_PASSWORD}='<a password>' && make up")
    missing = missing_gateway_files(plan.services) if "gateway" in plan.started else []
    if missing:
        again = "make up" + (" IMAGES=local" if any(f.name == LOCAL_OVERRIDE for f in plan.files) else "")
        return ("the gateway's certificates and API keys are missing: "
                f"{', '.join(str(p) for p in missing)}\n  make certs && {again}")
    images = missing_local_images(plan, docker) if any(f.name == LOCAL_OVERRIDE for f in plan.files) else []
    if images:
        return f"local images missing: {', '.join(images)}\n  make images && make up IMAGES=local"
    return None


def _write_compose_state(plan: ComposePlan, state_file: Path) -> None:
    """stack.json of a compose run: its models config, the gateway's addresses, the CA and admin key, and
    the compose files, profiles and project that ``make down`` stops."""
    tfserving, gateway = plan.services["tfserving"], plan.services["gateway"]
    model_repo = volume_map(tfserving)[CONTAINER_MODELS_DIR]
    secrets = _gateway_secrets(gateway)
    old = read_state(state_file)
    write_state(StackState(plan.backend, service_models_config(tfserving), _address(gateway, 8500),
                           f"https://{_address(gateway, 8501)}", model_repo, {CONTAINER_MODELS_DIR: model_repo},
                           removed=old.removed if old else (), root_certificates=secrets / "ca.crt",
                           admin_key_file=secrets / "admin.api-key", compose_files=tuple(plan.files),
                           compose_profiles=tuple(plan.profiles), compose_project=plan.project,
                           compose_env=_set_by_make_up(plan)), state_file)


def _set_by_make_up(plan: ComposePlan) -> dict[str, str]:
    """The variables of the compose files that compose ran with (``.env`` aside): what make up set
    (HOST_UID/HOST_GID, the config directory, capped CPU limits) and what was exported then (ports, ...),
    so later commands interpolate the files the same way. Grafana's password is never recorded."""
    used = {name for path in plan.files for name in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", path.read_text())}
    return {k: plan.env[k] for k in sorted(used) if k in plan.env and k != GRAFANA_PASSWORD}


def _print_banner(plan: ComposePlan, root: Path, state_file: Path) -> None:
    """How to call the compose stack: through the gateway; Grafana and Prometheus where they were started."""
    services = plan.services
    gateway, tfserving = services["gateway"], services["tfserving"]
    served = [e.name for e in load_model_server_config(service_models_config(tfserving)).model_config_list.config]
    model = served[0] if served else "NAME"
    dashboards = []
    if "grafana" in plan.started:
        dashboards.append(f"Grafana: http://{_address(services['grafana'], 3000)} (admin / $GRAFANA_ADMIN_PASSWORD)")
    if "prometheus" in plan.started:
        dashboards.append(f"Prometheus: http://{_address(services['prometheus'], 9090)}")
    host_args = remap_server_args(tfserving.get("command") or [], volume_map(tfserving))
    print_gateway_usage(_address(gateway, 8500), f"https://{_address(gateway, 8501)}", _address(gateway, 8443),
                        _gateway_secrets(gateway), model, dashboards=dashboards,
                        batching=batching_summary(host_args, root),
                        work_flag="" if Path(state_file).parent == DEFAULT_WORK_DIR.resolve()
                        else f" --work-dir {Path(state_file).parent}")


def _address(service: Mapping, target: int) -> str:
    """``HOST:PORT`` where a compose service publishes container port ``target`` (any address: 127.0.0.1)."""
    port = next(p for p in service.get("ports", []) if p["target"] == target)
    host = port.get("host_ip") or "127.0.0.1"
    return f"{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{int(port['published'])}"


def compose_containers(state: StackState, *, timeout: float = 120.0) -> Optional[list[str]]:
    """The ids of the containers of the compose project ``state`` records (stopped ones too); None when
    compose cannot tell (no engine answers, or compose fails)."""
    base = _compose_base(state.compose_files, state.compose_profiles, state.compose_project)
    env = recorded_env(state, os.environ)  # compose interpolates every service's variables
    try:
        running = subprocess.run([*base, "ps", "--all", "-q"], capture_output=True, text=True, env=env,
                                 timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return running.stdout.split() if running.returncode == 0 else None


def compose_down(state: StackState, *, timeout: float = 600.0) -> int:
    """``compose down`` of the stack ``state`` records (its files, profiles and project); 0 when nothing
    runs (said so). Volumes (Prometheus' data) and the model repository stay."""
    base = _compose_base(state.compose_files, state.compose_profiles, state.compose_project)
    env = recorded_env(state, os.environ)  # down interpolates every service's variables
    if compose_containers(state, timeout=timeout) == []:
        print(f"make down: nothing runs: no container of the compose project {state.compose_project or '(default)'}"
              f" ({state.backend})", flush=True)
        return 0
    print("+", shlex.join([*base, "down"]), flush=True)
    code = subprocess.run([*base, "down"], env=env, timeout=timeout).returncode
    if code == 0:
        print(f"make down: stopped the {state.backend} stack (project {state.compose_project}); "
              "the models and Prometheus' data stay", flush=True)
    return code
