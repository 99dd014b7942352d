"""Servers a sweep or the tuner starts itself: the embedded server, or TF Serving in Docker.

Both take a model repository, optional ``BatchingParameters`` and extra TF
Serving flags, write the text-proto config files with the real protos from
tensorflow-serving-api (``serving.config.protos`` where the wheel lacks them), and expose ``grpc_target``, ``rest_url`` and
``metrics_url``. Both are context managers with ``start()``/``stop()``.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional, Sequence

__all__ = [
    "MONITORING_PATH",
    "EmbeddedServer",
    "DockerServer",
    "free_port",
    "model_config_text",
    "batching_config_text",
    "monitoring_config_text",
    "wait_available",
    "model_available",
]

MONITORING_PATH = "/monitoring/prometheus/metrics"
_REPO_ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def model_config_text(models: dict[str, Path]) -> str:
    """A ``ModelServerConfig`` text proto serving each ``name → base_path``."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    config = model_server_config_pb2.ModelServerConfig()
    for name, base_path in models.items():
        entry = config.model_config_list.config.add()
        entry.name, entry.base_path, entry.model_platform = name, str(base_path), "tensorflow"
    return text_format.MessageToString(config)


def batching_config_text(params: Any) -> str:
    """A ``BatchingParameters`` text proto from the proto itself or a ``{field: value}`` dict."""
    from google.protobuf import text_format

    from serving.config.protos import batching_parameters_class

    if isinstance(params, dict):
        proto = batching_parameters_class()()
        for name, value in params.items():
            getattr(proto, name).value = value
        params = proto
    return text_format.MessageToString(params)


def monitoring_config_text(path: str = MONITORING_PATH) -> str:
    from google.protobuf import text_format

    from serving.config.protos import monitoring_config_class

    config = monitoring_config_class()()
    config.prometheus_config.enable, config.prometheus_config.path = True, path
    return text_format.MessageToString(config)


def wait_available(rest_url: str, models: Sequence[str], timeout: float, alive=lambda: True) -> None:
    """Block until each model has an AVAILABLE version (REST model status), or raise ``TimeoutError``."""
    deadline = time.monotonic() + timeout
    pending = list(models)
    while pending and time.monotonic() < deadline:
        if not alive():
            raise RuntimeError("the server exited while loading models")
        pending = [m for m in pending if not model_available(rest_url, m)]
        if pending:
            time.sleep(0.25)
    if pending:
        raise TimeoutError(f"models not AVAILABLE after {timeout:.0f}s: {pending}")


def model_available(rest_url: str, model: str, timeout: float = 2.0) -> bool:
    """Whether REST model status at ``rest_url`` lists an AVAILABLE version of ``model``."""
    try:
        with urllib.request.urlopen(f"{rest_url}/v1/models/{model}", timeout=timeout) as response:
            body = json.loads(response.read())
    except (OSError, ValueError):
        return False
    return any(v.get("state") == "AVAILABLE" for v in body.get("model_version_status", []))


class _ConfiguredServer:
    """Shared config-file writing for both kinds of server."""

    def __init__(self, models: dict[str, Path], *, batching: Any = None, extra_flags: Sequence[str] = (),
                 workdir: Optional[Path] = None, ready_timeout: float = 300.0) -> None:
        self.models = {name: Path(path).resolve() for name, path in models.items()}
        self.batching = batching
        self.extra_flags = list(extra_flags)
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="loadtest-server-"))
        self.ready_timeout = ready_timeout
        self.grpc_port = free_port()
        self.rest_port = free_port()

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def metrics_url(self) -> str:
        return self.rest_url + MONITORING_PATH

    def _write_configs(self, path_of=lambda p: p) -> list[str]:
        """Write the config files; the flags that point at them (paths mapped by ``path_of``)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        models = {name: path_of(path) for name, path in self.models.items()}
        (self.workdir / "models.config").write_text(model_config_text(models))
        (self.workdir / "monitoring.config").write_text(monitoring_config_text())
        flags = [f"--model_config_file={path_of(self.workdir / 'models.config')}",
                 f"--monitoring_config_file={path_of(self.workdir / 'monitoring.config')}"]
        if self.batching is not None:
            (self.workdir / "batching.config").write_text(batching_config_text(self.batching))
            flags += ["--enable_batching=true", f"--batching_parameters_file={path_of(self.workdir / 'batching.config')}"]
        return flags + self.extra_flags

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class EmbeddedServer(_ConfiguredServer):
    """``python -m serving.server`` with TF Serving's flags on free loopback ports.

    ``batching=None`` serves without batching; a dict or ``BatchingParameters``
    turns on ``--enable_batching`` with that file. Ready when every model is AVAILABLE.
    """

    def start(self) -> "EmbeddedServer":
        flags = [f"--port={self.grpc_port}", f"--rest_api_port={self.rest_port}", *self._write_configs()]
        self.log_path = self.workdir / "server.log"
        self._log = open(self.log_path, "wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
        self.proc = subprocess.Popen([sys.executable, "-m", "serving.server", *flags], cwd=_REPO_ROOT,
                                     stdout=self._log, stderr=subprocess.STDOUT, env=env)
        try:
            wait_available(self.rest_url, list(self.models), self.ready_timeout, lambda: self.proc.poll() is None)
        except Exception as error:
            self.stop()
            raise RuntimeError(f"{error}\n--- server log tail ---\n{self.log_tail()}") from None
        return self

    def stop(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if getattr(self, "_log", None):
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 40) -> str:
        path = getattr(self, "log_path", None)
        if not path or not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class DockerServer(_ConfiguredServer):
    """Real TF Serving in a container via the ``docker`` SDK (needs a Docker engine).

    NOT RUN on the development machine (no engine there): the code path is
    written to the docker SDK's documented API and kept small. The model
    repository and the config directory are bind-mounted read-only at the
    same paths inside the container, so every path in the configs holds.
    """

    def __init__(self, models: dict[str, Path], *, image: str = "tensorflow/serving:2.17.1", **kwargs: Any) -> None:
        super().__init__(models, **kwargs)
        self.image = image

    def start(self) -> "DockerServer":
        import docker

        flags = ["--port=8500", "--rest_api_port=8501", *self._write_configs()]
        mounts = {str(p.parent): {"bind": str(p.parent), "mode": "ro"} for p in self.models.values()}
        mounts[str(self.workdir)] = {"bind": str(self.workdir), "mode": "ro"}
        self.client = docker.from_env()
        self.container = self.client.containers.run(
            self.image, command=flags, entrypoint=["tensorflow_model_server"], detach=True, auto_remove=False,
            ports={"8500/tcp": ("127.0.0.1", self.grpc_port), "8501/tcp": ("127.0.0.1", self.rest_port)},
            volumes=mounts)
        try:
            wait_available(self.rest_url, list(self.models), self.ready_timeout, self._running)
        except Exception:
            self.stop()
            raise
        return self

    def _running(self) -> bool:
        self.container.reload()
        return self.container.status in ("created", "running")

    def stop(self) -> None:
        container = getattr(self, "container", None)
        if container is not None:
            container.stop(timeout=10)
            container.remove(force=True)
            self.container = None
