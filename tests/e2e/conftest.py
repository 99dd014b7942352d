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

from pathlib import Path
from typing import Iterator

import pytest

from tests.support.compose_stack import PROJECT, Stack, running_stack, skip_reason


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory, cpu_stack_repo: Path) -> Iterator[Stack]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with running_stack(tmp_path_factory.mktemp("e2e") / "tfs-stack", cpu_stack_repo, PROJECT) as made:
        yield made
