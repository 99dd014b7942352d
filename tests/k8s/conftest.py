"""The Kubernetes overlays as ``kubectl kustomize`` renders them (offline), and the compose model they mirror.

Every directory under ``deploy/k8s/overlays`` with a kustomization is an
overlay. ``kubectl`` is a build-machine tool: where it is missing, the tests
that render are skipped, with the reason.
"""
from __future__ import annotations

import pytest

from deploy.k8s.generate import Checkout, compose_services
from serving.checkout import REPO_ROOT
from tests.support.k8s import K8S_DIR, OVERLAYS, kustomize


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict]]:
    """Overlay name → its rendered objects."""
    return {name: kustomize(K8S_DIR / "overlays" / name) for name in OVERLAYS}


@pytest.fixture(scope="session")
def compose() -> dict[str, dict[str, dict]]:
    """Variant → the compose services (``tfserving``, ``exporter``) as Compose parses them."""
    return {variant: compose_services(Checkout(REPO_ROOT), variant) for variant in ("gpu", "cpu")}
