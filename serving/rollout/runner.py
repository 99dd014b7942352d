"""Pushing planned configs to a server and waiting for versions to become AVAILABLE.

The rollout talks to TF Serving's ``ModelService`` through the SDK's
``GrpcClient`` (``reload_config``, ``status``): TF Serving's wire format
without TensorFlow, failures as ``serving.status`` exceptions carrying the
server's code and message.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from serving import status
from serving.client import NO_RETRY, GrpcClient, VersionStatus
from serving.config.models import write_model_server_config
from serving.rollout.plan import RolloutError, Step

__all__ = ["connect", "version_states", "Rollout"]

AVAILABLE = "AVAILABLE"
# A reload waits for the server to load every new version: minutes for a large model.
RELOAD_TIMEOUT = 300.0
STATUS_TIMEOUT = 10.0


def connect(target: str) -> GrpcClient:
    """A ``GrpcClient`` for a rollout: long reloads, no retries (a rollout step is pushed once)."""
    return GrpcClient(target, timeout=RELOAD_TIMEOUT, retry=NO_RETRY)


def version_states(client: GrpcClient, name: str) -> dict[int, VersionStatus]:
    """``{version: VersionStatus}`` for every version of ``name`` (``GetModelStatus``)."""
    return {s.version: s for s in client.status(name, timeout=STATUS_TIMEOUT)}


class Rollout:
    """Applies planned steps: push, wait until AVAILABLE, write the config back.

    ``config_file`` (optional) is rewritten after every accepted step, so a
    server polling that file (``--model_config_file_poll_wait_seconds``) reads
    the state the rollout pushed instead of reverting it.
    """

    def __init__(self, client: GrpcClient, *, config_file: Optional[Path] = None,
                 wait_timeout: float = 600.0, poll_interval: float = 0.25,
                 log: Callable[[str], None] = print) -> None:
        self.client = client
        self.config_file = Path(config_file) if config_file else None
        self.wait_timeout = wait_timeout
        self.poll_interval = poll_interval
        self.log = log

    def apply(self, name: str, steps: Sequence[Step]) -> None:
        """Run ``steps`` for model ``name`` in order; RolloutError on the first failure."""
        if not steps:
            self.log(f"{name}: nothing to do")
        for step in steps:
            self.log(f"{name}: {step.description}")
            try:
                self.client.reload_config(step.config)
            except status.ServingError as exc:
                raise RolloutError(f"the server rejected '{step.description}': {exc}") from exc
            if self.config_file is not None:
                write_model_server_config(step.config, self.config_file)
            self.wait_available(name, step.wait_for)

    def wait_available(self, name: str, versions: Sequence[int]) -> None:
        """Block until every version in ``versions`` is AVAILABLE; RolloutError if one fails."""
        deadline = time.monotonic() + self.wait_timeout
        while True:
            try:
                states = {v: (s.state, s.error_message) for v, s in version_states(self.client, name).items()}
            except status.NotFound:
                states = {}
            pending = [v for v in versions if states.get(v, ("", ""))[0] != AVAILABLE]
            if not pending:
                return
            for version in pending:
                state, error = states.get(version, ("", ""))
                if state == "END" and error:
                    raise RolloutError(f"{name} version {version} failed to load: {error}")
            if time.monotonic() > deadline:
                raise RolloutError(f"{name} versions {pending} not AVAILABLE after "
                                   f"{self.wait_timeout:.0f} s (states: {states})")
            time.sleep(self.poll_interval)
