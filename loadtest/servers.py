"""Servers a sweep or the tuner starts itself: the embedded server, or TF Serving in Docker.

The embedded server is ``serving.launcher.ServerProcess`` (the one
launcher). ``DockerServer`` runs real TF Serving with the same config files
(``write_config_files``) through the docker SDK. ``start_server`` picks one;
both satisfy ``RunningServer``: ``grpc_target``, ``rest_url``,
``metrics_url``, ``pid``, ``start()``/``stop()`` and the context manager.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Mapping, Optional, Protocol, Sequence

from loadtest.options import UsageError
from serving.config.files import BatchingSpec, write_config_files
from serving.launcher import ServerProcess
from serving.stack.docker import Mount, TFServingContainer, run_tf_serving, tfserving_image, tfserving_unavailable

__all__ = ["RunningServer", "DockerServer", "docker_image", "start_server"]


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


def docker_image(gpu: bool = False) -> str:
    """The TF Serving image ``--docker`` runs (``-gpu`` with ``gpu``), after checking it can run here.

    ``UsageError`` with the reason where no engine answers or the image is not
    present locally: it is never pulled, so nothing would start.
    """
    image = tfserving_image(gpu=gpu)
    reason = tfserving_unavailable(image)
    if reason:
        raise UsageError(f"--docker: {reason}")
    return image


def start_server(models: Mapping[str, Path], *, workdir: Optional[Path] = None,
                 batching: Optional[BatchingSpec] = None, extra_flags: Sequence[str] = (),
                 docker_engine: bool = False, gpu: bool = False, ready_timeout: float = 300.0) -> RunningServer:
    """A server (not started yet) for ``name → base_path``: the embedded one, or TF Serving in Docker.

    Config files and the log go to ``workdir`` (a new temp directory by default).
    ``batching=None`` serves without batching. ``gpu`` (Docker only) runs TF
    Serving's ``-gpu`` image with the host's GPUs; the embedded server runs
    TensorFlow's CPU build, so it refuses ``gpu``. With ``docker_engine``,
    ``UsageError`` where the image cannot run here (:func:`docker_image`).
    """
    workdir = Path(workdir or tempfile.mkdtemp(prefix="loadtest-server-"))
    if docker_engine:
        return DockerServer(models, workdir=workdir, batching=batching, extra_flags=extra_flags,
                            image=docker_image(gpu), ready_timeout=ready_timeout, gpu=gpu)
    if gpu:
        raise ValueError("gpu=True needs docker_engine=True: the embedded server runs TensorFlow's CPU build")
    return ServerProcess.for_models(models, workdir=workdir, batching=batching, extra_flags=extra_flags,
                                    timeout=ready_timeout)


class DockerServer:
    """Real TF Serving in a container (``serving.stack.docker.run_tf_serving``), started by ``start()``.

    The model repository and the config directory are bind-mounted read-only
    at the same paths inside the container, so every path in the configs
    holds. ``gpu`` requests every GPU of the host (``docker run --gpus all``;
    needs the NVIDIA container runtime); ``image`` is then the ``-gpu`` one.
    NOT RUN on the development machine: its engine has no TF Serving image.
    """

    def __init__(self, models: Mapping[str, Path], *, workdir: Path, image: str,
                 batching: Optional[BatchingSpec] = None, extra_flags: Sequence[str] = (),
                 ready_timeout: float = 300.0, gpu: bool = False) -> None:
        self.models = {name: Path(path).resolve() for name, path in models.items()}
        self.workdir = Path(workdir).resolve()
        self.batching = batching
        self.extra_flags = list(extra_flags)
        self.image, self.gpu = image, gpu
        self.ready_timeout = ready_timeout
        self.container: Optional[TFServingContainer] = None

    def _started(self) -> TFServingContainer:
        if self.container is None:
            raise RuntimeError("the TF Serving container is not started")
        return self.container

    @property
    def grpc_target(self) -> str:
        return self._started().grpc_target

    @property
    def rest_url(self) -> str:
        return self._started().rest_url

    @property
    def metrics_url(self) -> str:
        return self._started().metrics_url

    @property
    def pid(self) -> Optional[int]:
        return None  # inside the container; its CPU is not measured

    def start(self) -> "DockerServer":
        flags = [*write_config_files(self.workdir, self.models, batching=self.batching), *self.extra_flags]
        mounts = {p.parent: Mount(p.parent, str(p.parent)) for p in self.models.values()}
        mounts[self.workdir] = Mount(self.workdir, str(self.workdir))
        self.container = run_tf_serving(flags, image=self.image, mounts=list(mounts.values()), gpu=self.gpu,
                                        wait_for=list(self.models), ready_timeout=self.ready_timeout)
        return self

    def stop(self) -> None:
        if self.container is not None:
            self.container.stop()
            self.container = None

    def __enter__(self) -> "DockerServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
