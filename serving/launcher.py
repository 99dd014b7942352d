"""Start ``python -m serving.server`` as a subprocess, wait until its models are AVAILABLE, stop it.

The one launcher of the embedded server: ``make up`` (``serving.stack``), the load
tests (``loadtest.servers``), the benchmarks and the test suite
(``tests/support/servers.py``) all start it through :class:`ServerProcess`.

- It takes ``tensorflow_model_server``'s own flags, so a caller states exactly
  the command line TF Serving would get; :meth:`ServerProcess.for_models`
  writes the config files for a set of models (with optional
  ``BatchingParameters``) through ``serving.config.files.write_config_files``.
- Ports are free loopback ports (:func:`free_port`) unless given.
- Ready means: every listed model has an AVAILABLE version and no version
  still loading in REST model status (:func:`wait_until_available`, the one
  readiness probe: every version the config serves answers, not only the
  newest) and the REST port accepts connections.
- ``stop()`` sends SIGTERM (the server drains and exits 0), then kills after
  a timeout. The server's output goes to a log file (``log_tail()``) unless
  ``capture_output=False`` leaves it on the caller's terminal.

Importing this module loads neither TensorFlow nor the server.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import IO, Callable, Mapping, Optional, Sequence, TypeVar

from serving.checkout import REPO_ROOT
from serving.config.files import MONITORING_PATH, BatchingSpec, write_config_files
from serving.processes import stop_process

__all__ = [
    "LoopbackAddresses",
    "ServerProcess",
    "free_port",
    "free_ports",
    "port_open",
    "wait_for_port",
    "model_available",
    "wait_until_available",
]


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_ports(count: int) -> list[int]:
    """``count`` different TCP ports that were free on 127.0.0.1 a moment ago (all held while choosing, so
    two calls of :func:`free_port` in a row can never hand out one port twice)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections on ``host:port`` (a connect, no request sent)."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def wait_for_port(port: int, timeout: float = 30.0, *, alive: Callable[[], bool] = lambda: True) -> None:
    """Block until ``127.0.0.1:port`` accepts connections; ``RuntimeError`` once ``alive()`` is false,
    ``TimeoutError`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not port_open(port):
        if not alive():
            raise RuntimeError(f"the process exited before port {port} accepted connections")
        if time.monotonic() >= deadline:
            raise TimeoutError(f"nothing listens on port {port} after {timeout:.0f}s")
        time.sleep(0.1)


_STILL_LOADING = frozenset({"START", "LOADING"})


def model_available(rest_url: str, model: str, timeout: float = 2.0) -> bool:
    """Whether REST model status at ``rest_url`` lists an AVAILABLE version of ``model`` and no version still
    loading (START or LOADING).

    A server answers as soon as each model's newest version is AVAILABLE (TF Serving's
    ``WaitUntilModelsAvailable`` waits for ``Latest(model)`` only), while the other versions its config
    serves (a ``specific`` policy, ``latest { num_versions: N }``, the versions labels point at) may still
    be loading: a request for one of them would get NOT_FOUND. So a model is ready once every version the
    server is bringing up has settled: AVAILABLE, or END (a failed load reports its error in the status).
    """
    try:
        with urllib.request.urlopen(f"{rest_url}/v1/models/{model}", timeout=timeout) as response:
            body = json.loads(response.read())
    except (OSError, ValueError):
        return False
    states = [v.get("state") for v in body.get("model_version_status", [])]
    return "AVAILABLE" in states and not _STILL_LOADING.intersection(states)


def wait_until_available(rest_url: str, models: Sequence[str], timeout: float, *,
                         alive: Callable[[], bool] = lambda: True) -> None:
    """Block until each of ``models`` has an AVAILABLE version and none still loading (:func:`model_available`).

    Raises ``RuntimeError`` as soon as ``alive()`` is false (the server exited)
    and ``TimeoutError`` naming the models still pending after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    pending = list(models)
    while pending:
        if not alive():
            raise RuntimeError(f"the server exited while loading {', '.join(pending)}")
        pending = [m for m in pending if not model_available(rest_url, m, timeout=1.0)]
        if pending and time.monotonic() >= deadline:
            raise TimeoutError(f"models not AVAILABLE after {timeout:.0f}s: {', '.join(pending)}")
        if pending:
            time.sleep(0.25)


class LoopbackAddresses:
    """A server's addresses on 127.0.0.1 from its ``grpc_port`` and ``rest_port``."""

    grpc_port: int
    rest_port: int

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def metrics_url(self) -> str:
        """The Prometheus page, where ``write_config_files``' monitoring config puts it."""
        return self.rest_url + MONITORING_PATH


ServerProcessT = TypeVar("ServerProcessT", bound="ServerProcess")

class ServerProcess(LoopbackAddresses):
    """A ``python -m serving.server`` process; a context manager (``start()`` / ``stop()``).

    ``flags`` are TF Serving's flags (``--model_config_file=...``); ``--port``
    and ``--rest_api_port`` come first, from ``grpc_port`` / ``rest_port``
    (free ports by default). ``wait_for`` lists the models that must be
    AVAILABLE before ``start()`` returns. Output goes to ``log_path`` (a temp
    file by default), or to this process's own stdout/stderr with
    ``capture_output=False``. ``env`` adds to the environment. ``preexec_fn``
    runs in the child before the server (``Popen``'s; e.g. a parent-death signal).
    """

    def __init__(self, flags: Sequence[str] = (), *, wait_for: Sequence[str] = (),
                 grpc_port: Optional[int] = None, rest_port: Optional[int] = None,
                 log_path: Optional[Path] = None, capture_output: bool = True, timeout: float = 180.0,
                 env: Optional[Mapping[str, str]] = None,
                 preexec_fn: Optional[Callable[[], None]] = None) -> None:
        self.preexec_fn = preexec_fn
        self.grpc_port = grpc_port or free_port()
        self.rest_port = rest_port or free_port()
        self.args = [f"--port={self.grpc_port}", f"--rest_api_port={self.rest_port}", *flags]
        self.wait_for = list(wait_for)
        self.timeout = timeout
        self.log_path = log_path
        self.capture_output = capture_output
        self.env = dict(env or {})
        self.proc: Optional[subprocess.Popen] = None
        self._log: Optional[IO[bytes]] = None

    @classmethod
    def for_models(cls: type[ServerProcessT], models: Mapping[str, Path], *, workdir: Path,
                   batching: Optional[BatchingSpec] = None, extra_flags: Sequence[str] = (),
                   timeout: float = 300.0) -> ServerProcessT:
        """A server for ``name → base_path`` with its config files (``write_config_files``) and
        log (``server.log``) in ``workdir``; ready when every model is AVAILABLE."""
        models = {name: Path(path).resolve() for name, path in models.items()}
        flags = write_config_files(workdir, models, batching=batching)
        return cls([*flags, *extra_flags], wait_for=list(models), log_path=Path(workdir) / "server.log",
                   timeout=timeout)

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "serving.server", *self.args]

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc is not None else None

    def launch(self) -> None:
        """Start the process (does not wait for anything)."""
        output: Optional[IO[bytes]] = None
        if self.capture_output:
            if self.log_path is None:
                handle, name = tempfile.mkstemp(prefix="embedded-server-", suffix=".log")
                os.close(handle)
                self.log_path = Path(name)
            self._log = output = open(self.log_path, "wb")  # noqa: SIM115 - the child's log, closed by stop()
        env = {"TF_CPP_MIN_LOG_LEVEL": "2", **os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        self.proc = subprocess.Popen(self.command, cwd=REPO_ROOT, env=env, stdout=output,
                                     stderr=subprocess.STDOUT if output else None,
                                     preexec_fn=self.preexec_fn)  # noqa: PLW1509 - callers pass die_with_parent()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self) -> None:
        """Block until every ``wait_for`` model is AVAILABLE and REST accepts connections.

        ``RuntimeError`` if the process exits first, ``TimeoutError`` after ``timeout`` seconds.
        """
        deadline = time.monotonic() + self.timeout
        wait_until_available(self.rest_url, self.wait_for, self.timeout, alive=self.running)
        wait_for_port(self.rest_port, max(0.0, deadline - time.monotonic()), alive=self.running)

    def start(self) -> "ServerProcess":
        """``launch()`` and ``wait_ready()``; on failure the process is stopped and the error carries
        the log's tail."""
        self.launch()
        try:
            self.wait_ready()
        except (RuntimeError, TimeoutError) as error:
            code = self.stop()
            tail = self.log_tail()
            raise type(error)(f"embedded server not ready (exit status {code}): {error}"
                              + (f"\n--- server log tail ---\n{tail}" if tail else "")) from None
        return self

    def wait(self, timeout: Optional[float] = None) -> int:
        """Wait for the process to exit on its own; its exit status."""
        assert self.proc is not None, "launch() first"
        return self.proc.wait(timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> Optional[int]:
        """Send ``sig`` (SIGTERM: drain and exit), kill after ``timeout`` seconds; the exit status."""
        if self.proc is None:
            return None
        stop_process(self.proc, timeout, sig=sig)
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.proc.returncode

    def log_tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines of the server's log ("" when its output is not captured)."""
        if self.log_path is None or not Path(self.log_path).exists():
            return ""
        return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
