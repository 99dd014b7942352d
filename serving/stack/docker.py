"""Docker, asked through its CLI: the one probe, TF Serving's image, and TF Serving in a container.

- :func:`probe_engine` (``docker info``): does an engine answer, with which
  runtimes (``nvidia``), and why not. ``make up``'s backend choice, the GPU
  preflight, the contract suite, the tuner and the benchmarks all ask it.
- :func:`image_present` (``docker image inspect``): is an image here. Nothing
  in this module pulls: ``docker run`` gets ``--pull=never``.
- :func:`tfserving_image`: the image the compose stack runs, the ``tfserving``
  service's ``image`` of ``docker-compose.yml`` (GPU) or with
  ``docker-compose.cpu.yml`` (CPU), read with Compose. The compose files are
  what ``make up`` runs; their ``image`` is the whole name (repository, the
  ``.env`` pin, the ``-gpu`` suffix), interpolated by Compose itself
  (``.env``, or an exported ``TF_SERVING_VERSION``), so nothing here rebuilds
  it from ``TF_SERVING_VERSION``.
- :func:`tfserving_unavailable`: why that image cannot run here, in one
  sentence starting ``real TF Serving not run:``, or None.
- :func:`run_tf_serving`: the one way TF Serving is started in Docker: the
  image with given flags and mounts, its gRPC (8500) and REST (8501) ports
  published on 127.0.0.1, returned as a :class:`TFServingContainer`.

The CLI, not the docker SDK: it is the same client the user runs, every call
has a timeout, and the SDK's ``containers.run`` pulls a missing image.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from serving.checkout import REPO_ROOT
from serving.config.compose import COMPOSE_FILES, load_compose_model, with_grafana_placeholder
from serving.launcher import LoopbackAddresses, wait_until_available

__all__ = [
    "Engine",
    "Mount",
    "TFServingContainer",
    "TFServingUnavailable",
    "probe_engine",
    "image_id",
    "image_label",
    "image_present",
    "image_absent_reason",
    "tfserving_image",
    "tfserving_unavailable",
    "docker_run_argv",
    "run_tf_serving",
]

GRPC_PORT, REST_PORT = 8500, 8501  # inside the container (TF Serving's own defaults in the image)
NOT_RUN = "real TF Serving not run"
CONTAINER_LABEL = "tfs-stack.role=tfserving"


class TFServingUnavailable(RuntimeError):
    """TF Serving cannot run in Docker here (no engine, or the image is not present); the message says which."""


@dataclass(frozen=True)
class Engine:
    """What ``docker info`` said: whether an engine answers, its runtimes, and in words why (not)."""

    answers: bool
    runtimes: frozenset[str]
    reason: str
    cli: Optional[str]  # the docker CLI's path; None when it is not on PATH


@dataclass(frozen=True)
class Mount:
    """A bind mount: host ``source`` at ``target`` in the container."""

    source: Path
    target: str
    read_only: bool = True

    def volume(self) -> str:
        return f"{Path(self.source).resolve()}:{self.target}" + (":ro" if self.read_only else "")


def _run(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)


def _last_line(proc: subprocess.CompletedProcess) -> str:
    """The CLI's last words, without its "Run 'docker ... --help'" footer."""
    lines = [line.strip() for line in (proc.stderr or proc.stdout or "").splitlines()
             if line.strip() and not line.startswith("Run 'docker")]
    return (lines or ["no output"])[-1]


def probe_engine(docker: str = "docker", timeout: float = 20.0) -> Engine:
    """Ask ``docker info`` for the engine's runtimes; never raises for a missing or silent engine."""
    cli = shutil.which(docker)
    if cli is None:
        return Engine(False, frozenset(), f"no `{docker}` command on PATH", None)
    try:
        proc = _run([cli, "info", "--format", "{{json .Runtimes}}"], timeout)
    except subprocess.TimeoutExpired:
        return Engine(False, frozenset(), f"`{docker} info` did not answer within {timeout:g} s", cli)
    if proc.returncode != 0:
        return Engine(False, frozenset(), f"no Docker engine answers (`{docker} info`: {_last_line(proc)})", cli)
    try:
        runtimes = json.loads(proc.stdout or "{}") or {}
    except json.JSONDecodeError:
        return Engine(True, frozenset(), "a Docker engine answers (runtimes unreadable)", cli)
    return Engine(True, frozenset(runtimes), "a Docker engine answers", cli)


def _inspect_image(image: str, template: str, docker: str, timeout: float) -> Optional[str]:
    """``docker image inspect --format TEMPLATE IMAGE``'s output; None without the image, the CLI or an
    engine that answers in time (nothing is present where nothing runs). Never a pull."""
    if shutil.which(docker) is None:
        return None
    try:
        proc = _run([docker, "image", "inspect", "--format", template, image], timeout)
    except subprocess.TimeoutExpired:
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def image_id(image: str, docker: str = "docker", timeout: float = 20.0) -> Optional[str]:
    """The engine's ID of ``image`` in its local store, or None."""
    return _inspect_image(image, "{{.Id}}", docker, timeout)


def image_label(image: str, label: str, docker: str = "docker", timeout: float = 20.0) -> Optional[str]:
    """The value of ``label`` on ``image`` in the local store; None without the image or the label."""
    labels = _inspect_image(image, "{{json .Config.Labels}}", docker, timeout)
    return None if labels is None else (json.loads(labels or "null") or {}).get(label)


def image_present(image: str, docker: str = "docker", timeout: float = 20.0) -> bool:
    """Whether ``image`` is in the engine's local store (:func:`image_id`)."""
    return image_id(image, docker, timeout) is not None


def image_absent_reason(image: str) -> str:
    """The words for an image that is not here: it is never pulled, and how to get it."""
    return (f"image {image} is not present locally and is never pulled "
            f"(`docker pull {image}` on a host that reaches a registry, or `docker load` it here)")


def tfserving_image(gpu: bool = False, root: Path = REPO_ROOT) -> str:
    """The ``tfserving`` service's image in the compose files (GPU, or the CPU variant), read with Compose.

    Raises ``serving.config.compose.ComposeError`` when Compose is missing or rejects the files.
    """
    env = with_grafana_placeholder(os.environ)  # only tfserving's image is read
    files = [root / name for name in COMPOSE_FILES["gpu" if gpu else "cpu"]]
    model = load_compose_model(files, services=["tfserving"], env=env, project_dir=root)
    return model["services"]["tfserving"]["image"]


def tfserving_unavailable(image: str, docker: str = "docker", timeout: float = 20.0) -> Optional[str]:
    """Why ``image`` cannot run here (``real TF Serving not run: ...``): no engine, or the image is absent.
    None when an engine answers and the image is present."""
    engine = probe_engine(docker, timeout)
    if not engine.answers:
        return f"{NOT_RUN}: {engine.reason}"
    if not image_present(image, docker, timeout):
        return f"{NOT_RUN}: {image_absent_reason(image)}"
    return None


def docker_run_argv(image: str, flags: Sequence[str], *, name: str, mounts: Sequence[Mount] = (),
                    gpu: bool = False, grpc_port: int = 0, rest_port: int = 0, docker: str = "docker") -> list[str]:
    """``docker run`` of ``tensorflow_model_server`` in ``image`` as container ``name`` (detached, never pulling).

    Ports 8500/8501 are published on 127.0.0.1 (host port 0: the engine picks
    one); ``gpu`` requests every GPU (needs the NVIDIA container runtime).
    """
    argv = [docker, "run", "--detach", "--pull=never", "--name", name, "--label", CONTAINER_LABEL,
            "--publish", f"127.0.0.1:{grpc_port or ''}:{GRPC_PORT}",
            "--publish", f"127.0.0.1:{rest_port or ''}:{REST_PORT}"]
    for mount in mounts:
        argv += ["--volume", mount.volume()]
    if gpu:
        argv += ["--gpus", "all"]
    return [*argv, "--entrypoint", "tensorflow_model_server", image,
            f"--port={GRPC_PORT}", f"--rest_api_port={REST_PORT}", *flags]


@dataclass
class TFServingContainer(LoopbackAddresses):
    """A TF Serving container this process started: its endpoint (``grpc_target``, ``rest_url``,
    ``metrics_url``), ``running()``, ``log_tail()`` and ``stop()`` (which removes it); a context manager."""

    name: str  # the container name (tfs-stack-tfserving-...)
    grpc_port: int
    rest_port: int
    docker: str = "docker"
    launched_at: float = field(default_factory=time.perf_counter)  # just before `docker run`
    pid: Optional[int] = None  # the server runs inside the engine: no process of this host's tree

    def running(self) -> bool:
        try:
            proc = _run([self.docker, "inspect", "--format", "{{.State.Running}}", self.name], 20.0)
        except subprocess.TimeoutExpired:
            return True  # a busy engine is not a dead container
        return proc.returncode == 0 and proc.stdout.strip() == "true"

    def log_tail(self, lines: int = 15) -> str:
        try:
            proc = _run([self.docker, "logs", "--tail", str(lines), self.name], 20.0)
        except subprocess.TimeoutExpired:
            return "(docker logs did not answer)"
        return (proc.stdout + proc.stderr).strip()

    def stop(self) -> None:
        """Remove the container (``docker rm --force``); again is a no-op."""
        if self.name:
            _run([self.docker, "rm", "--force", self.name], 60.0)
            self.name = ""

    def __enter__(self) -> "TFServingContainer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _published(docker: str, name: str, port: int) -> int:
    """The host port the engine published for container port ``port``."""
    proc = _run([docker, "port", name, f"{port}/tcp"], 20.0)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(f"`docker port {name} {port}/tcp` failed: {_last_line(proc)}")
    return int(proc.stdout.strip().splitlines()[0].rsplit(":", 1)[1])


def run_tf_serving(flags: Sequence[str], *, image: str, mounts: Sequence[Mount] = (), gpu: bool = False,
                   grpc_port: int = 0, rest_port: int = 0, wait_for: Sequence[str] = (),
                   ready_timeout: float = 300.0, docker: str = "docker") -> TFServingContainer:
    """Start TF Serving's ``image`` with ``flags`` (``--port``/``--rest_api_port`` are added) and ``mounts``.

    Checks first (:func:`tfserving_unavailable`) and raises
    :class:`TFServingUnavailable` with the reason, pulling nothing. With
    ``wait_for``, returns once each of those models is AVAILABLE (REST model
    status), else removes the container and raises ``RuntimeError`` (it exited)
    or ``TimeoutError`` with its log tail.
    """
    reason = tfserving_unavailable(image, docker)
    if reason:
        raise TFServingUnavailable(reason)
    name = f"tfs-stack-tfserving-{uuid.uuid4().hex[:12]}"
    argv = docker_run_argv(image, flags, name=name, mounts=mounts, gpu=gpu, grpc_port=grpc_port,
                           rest_port=rest_port, docker=docker)
    launched_at = time.perf_counter()
    try:
        proc = _run(argv, 120.0)
    except subprocess.TimeoutExpired:
        proc = subprocess.CompletedProcess(argv, 1, "", "no answer within 120 s")
    if proc.returncode != 0:
        _run([docker, "rm", "--force", name], 60.0)  # created but not started (e.g. no such executable)
        raise RuntimeError(f"`docker run` of {image} failed: {_last_line(proc)}")
    container = TFServingContainer(name, 0, 0, docker, launched_at)
    try:
        container.grpc_port = _published(docker, container.name, GRPC_PORT)
        container.rest_port = _published(docker, container.name, REST_PORT)
        if wait_for:
            wait_until_available(container.rest_url, list(wait_for), ready_timeout, alive=container.running)
    except (RuntimeError, TimeoutError) as error:
        tail = container.log_tail()
        container.stop()
        raise type(error)(f"{image}: {error}\n--- container log tail ---\n{tail}") from None
    return container
