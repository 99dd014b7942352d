"""The Kubernetes overlays as ``kubectl kustomize`` renders them (offline), and the compose model they mirror.

Every directory under ``deploy/k8s/overlays`` with a kustomization is an
overlay. ``kubectl`` is a build-machine tool: where it is missing, the tests
that render are skipped, with the reason.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from deploy.k8s.generate import Checkout, compose_services
from tests.support.servers import REPO_ROOT

K8S_DIR = REPO_ROOT / "deploy" / "k8s"
OVERLAYS = sorted(p.parent.name for p in (K8S_DIR / "overlays").glob("*/kustomization.yaml"))
# Overlay → the compose variant its TF Serving Deployments run.
VARIANT = {"gpu": "gpu", "cpu": "cpu", "canary": "gpu", "canary-istio": "gpu", "gpu-queue-latency": "gpu"}


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.skip("kubectl is not installed (it renders the overlays: `kubectl kustomize`, no cluster needed)")
    return path


def kustomize(directory: Path) -> list[dict]:
    """``kubectl kustomize DIR`` as a list of objects; a failed build fails the test with kustomize's message."""
    proc = subprocess.run([kubectl(), "kustomize", str(directory)], check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"kubectl kustomize {directory} failed:\n{proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict]]:
    """Overlay name → its rendered objects."""
    return {name: kustomize(K8S_DIR / "overlays" / name) for name in OVERLAYS}


@pytest.fixture(scope="session")
def compose() -> dict[str, dict[str, dict]]:
    """Variant → the compose services (``tfserving``, ``exporter``) as Compose parses them."""
    return {variant: compose_services(Checkout(REPO_ROOT), variant) for variant in ("gpu", "cpu")}


def objects(docs: list[dict], kind: str) -> dict[str, dict]:
    """``metadata.name`` → object, for the objects of ``kind``."""
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def pod_specs(docs: list[dict]) -> dict[str, dict]:
    """``Kind/name`` → pod spec, for every Deployment and Job."""
    return {f"{d['kind']}/{d['metadata']['name']}": d["spec"]["template"]["spec"]
            for d in docs if d["kind"] in ("Deployment", "Job")}
