"""The compose stack on a real Docker engine: ``make up IMAGES=local`` in a copy of the checkout.

One stack for the session, started the way a user starts it (``python -m
serving.stack --images local``, which is what ``make up IMAGES=local`` runs) from
a copy of this checkout, so the exports, the gateway's secrets and the
rollout's config edits stay out of the tree. The repository's own
``docker-compose.yml`` + ``docker-compose.cpu.yml`` run, with
``docker-compose.local.yml`` naming the stand-in images that ``make images``
builds (no registry answers here). Grafana is not started: no Grafana image
can be had here (it has no stand-in), so its provisioning is checked
statically only (tests/monitoring).

The model repository comes pre-filled with every CPU model but ``digits``
(exports cached across test runs), so the exporter container exports one
model for real, and the start stays within minutes on 2 cores.

Skipped, with the reason, where no engine answers or the images are missing.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from gateway.certs import init_secrets
from serving.config.compose import with_grafana_placeholder
from serving.launcher import free_port
from serving.stack.compose import plan_compose
from tests.support.compose_stack import PROJECT, Stack, copy_checkout, remove_stale_projects, skip_reason


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory, cpu_stack_repo: Path) -> Iterator[Stack]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    remove_stale_projects()
    root = tmp_path_factory.mktemp("e2e") / "tfs-stack"
    copy_checkout(root, cpu_stack_repo)
    secrets = init_secrets(root / "gateway" / "secrets")
    ports = {name: free_port() for name in ("GATEWAY_GRPC_PORT", "GATEWAY_REST_PORT", "GATEWAY_MTLS_PORT",
                                             "PROMETHEUS_PORT")}
    # Grafana is not started; Compose still interpolates its required password in every command.
    env = with_grafana_placeholder({**{k: v for k, v in os.environ.items()
                                       if k not in ("HOST_UID", "HOST_GID", "GRAFANA_ADMIN_PASSWORD")},
                                    "COMPOSE_PROJECT_NAME": PROJECT, **{k: str(v) for k, v in ports.items()}})
    # What make up gives compose (HOST_UID/HOST_GID, CPU limits capped to this host), for the tests'
    # own compose commands.
    env = plan_compose("compose-cpu", "local", root, env, os.getuid(), os.getgid()).env
    made = Stack(root, env, secrets, ports["GATEWAY_GRPC_PORT"], ports["GATEWAY_REST_PORT"],
                 ports["GATEWAY_MTLS_PORT"], ports["PROMETHEUS_PORT"], "")
    try:
        proc = made.make_up()
        made.up_output = proc.stdout + proc.stderr
        if proc.returncode != 0:
            logs = made.compose("logs", "--no-color", "--tail", "60", check=False)
            raise AssertionError(f"make up IMAGES=local failed ({proc.returncode}):\n{made.up_output}\n"
                                 f"{logs.stdout[-6000:]}")
        yield made
    finally:
        made.compose("down", "-v", "--remove-orphans", "--timeout", "20", check=False)
