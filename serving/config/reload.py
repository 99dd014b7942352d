"""Pushing a models config to a running server, and waiting for its versions.

One step is one ``ModelServerConfig`` pushed with
``ModelService.HandleReloadConfigRequest`` through the SDK's ``GrpcClient``,
then the versions it names polled with ``GetModelStatus`` until they are
AVAILABLE. TF Serving and the embedded server alike answer both; failures
come back as ``serving.status`` exceptions carrying the server's code and
message. ``serving.config add|remove``, ``make up`` and the rollout push
through :class:`Reloader`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from serving import status
from serving.client import NO_RETRY, Connection, GrpcClient, VersionStatus

if TYPE_CHECKING:  # tensorflow_serving's protos load only when a config is read
    from tensorflow_serving.config.model_server_config_pb2 import ModelServerConfig

__all__ = ["ReloadError", "Step", "connect", "connect_with", "version_states", "Reloader"]

AVAILABLE = "AVAILABLE"
# A reload waits for the server to load every new version: minutes for a large model.
RELOAD_TIMEOUT = 300.0
STATUS_TIMEOUT = 10.0


class ReloadError(RuntimeError):
    """A config the server rejected, or versions that did not become AVAILABLE."""


@dataclass(frozen=True)
class Step:
    """One config to push; ``wait_for`` are the versions that must be AVAILABLE after it."""

    description: str
    config: ModelServerConfig
    wait_for: tuple[int, ...]


def connect(target: str, *, root_certificates: Optional[Path] = None, api_key: Optional[str] = None) -> GrpcClient:
    """A ``GrpcClient`` for config pushes: long reloads, no retries (a step is pushed once).

    ``root_certificates`` turns TLS on (the compose gateway); ``api_key`` is sent as ``x-api-key``.
    """
    return GrpcClient(target, timeout=RELOAD_TIMEOUT, retry=NO_RETRY, root_certificates=root_certificates,
                      api_key=api_key)


def connect_with(target: str, connection: Connection) -> GrpcClient:
    """``connect`` with every TLS argument and credential of ``connection`` (the CLI's arguments)."""
    return GrpcClient(target, timeout=RELOAD_TIMEOUT, retry=NO_RETRY, **connection.client_kwargs())


def version_states(client: GrpcClient, name: str) -> dict[int, VersionStatus]:
    """``{version: VersionStatus}`` for every version of ``name`` (``GetModelStatus``)."""
    return {s.version: s for s in client.status(name, timeout=STATUS_TIMEOUT)}


class Reloader:
    """Applies steps: write the config, push it, wait until AVAILABLE.

    ``write`` (optional) is called with each step's config *before* it is
    pushed, so the file a server polls (``--model_config_file_poll_wait_seconds``)
    never holds an older state than the one in flight, and a command killed
    after a push leaves the file saying what the server serves. A file that
    other commands change too needs their lock and a compare-and-swap:
    ``serving.config.served_config.change_served_config`` applies steps that way.
    """

    def __init__(self, client: GrpcClient, *, write: Optional[Callable[[ModelServerConfig], object]] = None,
                 wait_timeout: float = 600.0, poll_interval: float = 0.25,
                 log: Callable[[str], None] = print) -> None:
        self.client = client
        self.write = write
        self.wait_timeout = wait_timeout
        self.poll_interval = poll_interval
        self.log = log

    def apply(self, name: str, steps: Sequence[Step]) -> None:
        """Run ``steps`` for model ``name`` in order; ReloadError on the first failure."""
        if not steps:
            self.log(f"{name}: nothing to do")
        for step in steps:
            self.log(f"{name}: {step.description}")
            if self.write is not None:
                self.write(step.config)
            try:
                self.client.reload_config(step.config)
            except status.ServingError as exc:
                raise ReloadError(f"the server rejected '{step.description}': {exc}") from exc
            self.wait_available(name, step.wait_for)

    def wait_available(self, name: str, versions: Sequence[int]) -> None:
        """Block until every version in ``versions`` is AVAILABLE; ReloadError if one fails."""
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
                    raise ReloadError(f"{name} version {version} failed to load: {error}")
            if time.monotonic() > deadline:
                raise ReloadError(f"{name} versions {pending} not AVAILABLE after "
                                  f"{self.wait_timeout:.0f} s (states: {states})")
            time.sleep(self.poll_interval)
