"""Applying planned rollout steps to a server: :class:`Rollout`.

The rollout pushes through ``serving.config.reload`` (``HandleReloadConfigRequest``
and ``GetModelStatus`` with the SDK's ``GrpcClient``), the same path as
``python -m serving.config add|remove``; this module names it for rollouts and
writes each accepted step back to the models config file.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from serving.client import GrpcClient
from serving.config.models import write_model_server_config
from serving.config.reload import Reloader, connect, version_states

__all__ = ["connect", "version_states", "Rollout"]


class Rollout(Reloader):
    """Applies planned steps: write the config, push it, wait until AVAILABLE.

    ``config_file`` (optional) is rewritten before every step is pushed, so a
    server polling that file (``--model_config_file_poll_wait_seconds``) reads
    the state the rollout pushes instead of reverting it. (The CLI holds the
    config's lock around its steps: ``serving.config.served_config.change_served_config``.) A failed step raises
    ``serving.config.reload.ReloadError`` (``RolloutError`` is its subclass).
    """

    def __init__(self, client: GrpcClient, *, config_file: Optional[Path] = None,
                 wait_timeout: float = 600.0, poll_interval: float = 0.25,
                 log: Callable[[str], None] = print) -> None:
        target = Path(config_file) if config_file else None
        super().__init__(client, write=(lambda config: write_model_server_config(config, target)) if target else None,
                         wait_timeout=wait_timeout, poll_interval=poll_interval, log=log)
