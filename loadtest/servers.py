"""Servers a sweep or the tuner starts itself: the embedded server, or TF Serving in Docker.

The embedded server is ``serving.server.launcher.ServerProcess`` (the one
launcher). ``DockerServer`` runs real TF Serving with the same config files
(``write_config_files``) through the docker SDK. ``start_server`` picks one;
both satisfy ``RunningServer``: ``grpc_target``, ``rest_url``,
``metrics_url``, ``pid``, ``start()``/``stop()`` and the context manager.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Mapping, Optional, Protocol, Sequence

import docker

from serving.server.launcher import (
    BatchingSpec,
    LoopbackAddresses,
    ServerProcess,
    free_port,
    wait_until_available,
    write_config_files,
)

__all__ = ["RunningServer", "DockerServer", "start_server"]


class RunningServer(Protocol):
    """What the sweep and the tuner need of a server they started."""

    @property
    def grpc_target(self) -> str: ...

    @property
    def rest_url(self) -> str: ...

    @property
    def metrics_url(self) -> str: ...

    @property
    def pid(self) -> Optional[int]: ...

    def start(self) -> "RunningServer": ...

    def stop(self) -> object: ...

    def __enter__(self) -> "RunningServer": ...

    def __exit__(self, *exc: object) -> None: ...


def start_server(models: Mapping[str, Path], *, workdir: Optional[Path] = None,
                 batching: Optional[BatchingSpec] = None, extra_flags: Sequence[str] = (),
                 docker_engine: bool = False, gpu: bool = False, ready_timeout: float = 300.0) -> RunningServer:
    """A server (not started yet) for ``name → base_path``: the embedded one, or TF Serving in Docker.

    Config files and the log go to ``workdir`` (a new temp directory by default).
    ``batching=None`` serves without batching. ``gpu`` (Docker only) runs TF
    Serving's ``-gpu`` image with the host's GPUs; the embedded server runs
    TensorFlow's CPU build, so it refuses ``gpu``.
    """
    workdir = Path(workdir or tempfile.mkdtemp(prefix="loadtest-server-"))
    if docker_engine:
        return DockerServer(models, workdir=workdir, batching=batching, extra_flags=extra_flags,
                            ready_timeout=ready_timeout, gpu=gpu)
    if gpu:
        raise ValueError("gpu=True needs docker_engine=True: the embedded server runs TensorFlow's CPU build")
    return ServerProcess.for_models(models, workdir=workdir, batching=batching, extra_flags=extra_flags,
                                    timeout=ready_timeout)


class DockerServer(LoopbackAddresses):
    """Real TF Serving in a container via the ``docker`` SDK (needs a Docker engine).

    NOT RUN on the development machine (no engine there): the code path is
    written to the docker SDK's documented API and kept small. The model
    repository and the config directory are bind-mounted read-only at the
    same paths inside the container, so every path in the configs holds.
    ``gpu`` uses the ``-gpu`` image and requests every GPU of the host
    (``docker run --gpus all``; needs the NVIDIA container runtime).
    """

    def __init__(self, models: Mapping[str, Path], *, workdir: Path, batching: Optional[BatchingSpec] = None,
                 extra_flags: Sequence[str] = (), image: str = "tensorflow/serving:2.17.1",
                 ready_timeout: float = 300.0, gpu: bool = False) -> None:
        self.models = {name: Path(path).resolve() for name, path in models.items()}
        self.workdir = Path(workdir)
        self.batching = batching
        self.extra_flags = list(extra_flags)
        self.gpu = gpu
        self.image = image + "-gpu" if gpu and not image.endswith("-gpu") else image
        self.ready_timeout = ready_timeout
        self.grpc_port = free_port()
        self.rest_port = free_port()
        self.container: Optional[docker.models.containers.Container] = None

    @property
    def pid(self) -> Optional[int]:
        return None  # inside the container; its CPU is not measured

    def start(self) -> "DockerServer":
        flags = ["--port=8500", "--rest_api_port=8501",
                 *write_config_files(self.workdir, self.models, batching=self.batching), *self.extra_flags]
        mounts = {str(p.parent): {"bind": str(p.parent), "mode": "ro"} for p in self.models.values()}
        mounts[str(self.workdir)] = {"bind": str(self.workdir), "mode": "ro"}
        self.container = docker.from_env().containers.run(
            self.image, command=flags, entrypoint=["tensorflow_model_server"], detach=True, auto_remove=False,
            ports={"8500/tcp": ("127.0.0.1", self.grpc_port), "8501/tcp": ("127.0.0.1", self.rest_port)},
            volumes=mounts,
            device_requests=[docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])] if self.gpu else None)
        try:
            wait_until_available(self.rest_url, list(self.models), self.ready_timeout, alive=self._running)
        except Exception:
            self.stop()
            raise
        return self

    def _running(self) -> bool:
        assert self.container is not None
        self.container.reload()
        return self.container.status in ("created", "running")

    def stop(self) -> None:
        if self.container is not None:
            self.container.stop(timeout=10)
            self.container.remove(force=True)
            self.container = None

    def __enter__(self) -> "DockerServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
