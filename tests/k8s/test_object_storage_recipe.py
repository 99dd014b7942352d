"""deploy/k8s/README.md's S3 recipe is a patch that applies: rendered onto an overlay, the served
``models`` volume is a pod-local copy that an init container fills and a sidecar keeps in sync.

TF Serving images since 2.7 do not read ``s3://`` base paths (``File system scheme 's3' not
implemented``), so the README shows a sync step instead; this keeps that block applicable. Rendered
offline with ``kubectl kustomize``; no cluster or bucket is reached.
"""
from __future__ import annotations

import re
import shutil

from tests.support.k8s import K8S_DIR, kustomize, objects

README = K8S_DIR / "README.md"


def _s3_patch() -> str:
    text = README.read_text()
    return re.search(r"```yaml\n(.*?)```", text[text.index("**S3 (or MinIO):**"):], re.S).group(1)


def test_the_readme_says_s3_is_not_read_and_gs_is():
    text = " ".join(README.read_text().split())
    assert "File system scheme 's3' not implemented" in text and "reads `gs://` base paths directly" in text
    assert "reads `s3://` and `gs://`" not in text


def test_the_s3_sync_patch_applies_to_an_overlay(tmp_path):
    shutil.copytree(K8S_DIR, tmp_path / "k8s", ignore=shutil.ignore_patterns("schemas", "__pycache__"))
    (tmp_path / "s3-sync.yaml").write_text(_s3_patch())
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources: [k8s/overlays/cpu]\npatches: [{path: s3-sync.yaml}]\n")
    spec = objects(kustomize(tmp_path), "Deployment")["tfserving"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["models"] == {"name": "models", "emptyDir": {}}  # the claim is gone, not merged beside it
    (init,) = spec["initContainers"]
    containers = {c["name"]: c for c in spec["containers"]}
    assert set(containers) == {"tfserving", "model-sync"}
    for syncer in (init, containers["model-sync"]):
        assert "aws s3 sync" in " ".join(syncer["command"])
        assert {"name": "models", "mountPath": "/models"} in syncer["volumeMounts"]
    served = {m["name"]: m for m in containers["tfserving"]["volumeMounts"]}
    assert served["models"]["readOnly"] is True
