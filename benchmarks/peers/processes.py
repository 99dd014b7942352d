"""The peers' processes: start one (a venv's server, or TF Serving in Docker), wait for its first
answer, check that answer against the embedded server's, stop it."""
from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Union

import numpy as np

from benchmarks.peers.envs import APPS, PEERS, PeerUnavailable, clean_env, ensure_venv
from serving import codec
from serving.processes import stop_process
from serving.launcher import free_port
from serving.stack.docker import Mount, TFServingContainer, TFServingUnavailable, run_tf_serving, tfserving_image

__all__ = ["PeerProcess", "answers_agree", "launch_peer", "wait_for_answer"]


class PeerProcess:
    """One peer (or any server command) in its own process group; ``launch()`` / ``stop()``."""

    def __init__(self, argv: Sequence[str], port: int, env: Mapping[str, str], log_path: Path) -> None:
        self.argv, self.port, self.env, self.log_path = list(argv), port, dict(env), log_path
        self.proc: Optional[subprocess.Popen] = None
        self.launched_at = 0.0  # time.perf_counter() at the process's start: cold start counts from here

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    def launch(self) -> None:
        with open(self.log_path, "wb") as log:
            self.launched_at = time.perf_counter()
            self.proc = subprocess.Popen(self.argv, cwd=APPS, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL to the process group this object started, after ``timeout``."""
        if self.proc is not None:
            stop_process(self.proc, timeout, group="kill")

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def launch_peer(name: str, model: str, version_dir: Path, log_dir: Path
                ) -> tuple[Union[PeerProcess, TFServingContainer], bool]:
    """Start peer ``name`` serving ``version_dir`` (its venv built first if needed); the process, and
    whether its CPU is this machine's process tree (not so for a Docker container)."""
    if name == "tfserving":
        # The image's entrypoint script would add these two flags from MODEL_NAME; the server is called itself.
        flags = [f"--model_name={model}", f"--model_base_path=/models/{model}"]
        try:
            return run_tf_serving(flags, image=tfserving_image(), mounts=[Mount(version_dir.parent,
                                                                                f"/models/{model}")]), False
        except TFServingUnavailable as error:
            raise PeerUnavailable(str(error)) from None
    port, spare = free_port(), free_port()
    spec = PEERS[name]
    venv = ensure_venv(spec)
    peer = PeerProcess(spec.argv(venv, model, str(version_dir), port, spare), port,
                       clean_env(spec.env(model, str(version_dir))), log_dir / f"{name}-{model}.log")
    peer.launch()
    return peer, True


def wait_for_answer(rest_url: str, model: str, body: bytes, timeout: float,
                    alive: Callable[[], bool]) -> bytes:
    """POST ``body`` to Predict until it answers 200; the answer. ``RuntimeError`` when the process dies."""
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(f"{rest_url}/v1/models/{model}:predict", data=body,
                                     headers={"Content-Type": "application/json"})
    while True:
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.read()
        except (OSError, urllib.error.HTTPError):
            pass
        if not alive():
            raise RuntimeError("the server exited before answering")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no answer within {timeout:.0f}s")
        time.sleep(0.05)


def answers_agree(reference: bytes, answer: bytes, atol: float, rtol: float) -> Optional[str]:
    """None when two REST Predict answers hold the same outputs within tolerance, else what differs."""
    expected, got = codec.rest_response_to_outputs(reference), codec.rest_response_to_outputs(answer)
    if set(expected) != set(got):
        return f"outputs {sorted(got)} instead of {sorted(expected)}"
    for name, value in expected.items():
        other = np.asarray(got[name])
        if other.shape != np.shape(value):
            return f"output {name!r}: shape {other.shape} instead of {np.shape(value)}"
        if not np.allclose(other.astype(np.float64), np.asarray(value, np.float64), atol=atol, rtol=rtol):
            return f"output {name!r}: max difference {np.max(np.abs(other - value)):.3g} (atol {atol}, rtol {rtol})"
    return None
