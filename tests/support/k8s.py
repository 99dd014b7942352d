"""The Kubernetes overlays as ``kubectl kustomize`` renders them (offline): where they are, and their objects.

``kubectl`` is a build-machine tool: where it is missing, a test that renders is skipped, with the reason.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from serving.checkout import REPO_ROOT


__all__ = ["K8S_DIR", "OVERLAYS", "VARIANT", "kubectl", "kustomize", "objects", "pod_specs"]

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
    proc = subprocess.run([kubectl(), "kustomize", str(directory)], check=False, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"kubectl kustomize {directory} failed:\n{proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def objects(docs: list[dict], kind: str) -> dict[str, dict]:
    """``metadata.name`` → object, for the objects of ``kind``."""
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def pod_specs(docs: list[dict]) -> dict[str, dict]:
    """``Kind/name`` → pod spec, for every Deployment and Job."""
    return {f"{d['kind']}/{d['metadata']['name']}": d["spec"]["template"]["spec"]
            for d in docs if d["kind"] in ("Deployment", "Job")}
