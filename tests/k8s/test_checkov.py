"""checkov (PyPI, pinned in the dev extra) on every rendered overlay: no failed check, every skip explained.

checkov's kubernetes framework reads the rendered objects (kustomize's output,
what would be applied). A deliberate exception is a ``checkov.io/skip<N>:
CKV_...=<reason>`` annotation on the object it excuses, with a comment beside it.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from serving.checkout import REPO_ROOT
from tests.support.k8s import K8S_DIR, OVERLAYS

pytestmark = pytest.mark.slow  # one checkov run over every overlay: ~15-40 s


def _annotated_skips() -> set[str]:
    """The check ids annotated as deliberate exceptions in the manifests (with a reason each)."""
    skips = set()
    for path in K8S_DIR.rglob("*.yaml"):
        if "schemas" in path.parts:
            continue
        for check, reason in re.findall(r"checkov\.io/skip\d+:\s*(CKV\w+)=(.*)", path.read_text()):
            assert len(reason.strip()) > 40, f"{path}: {check} needs its reason"
            skips.add(check)
    return skips


@pytest.fixture(scope="module")
def report(rendered, tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("rendered")
    for overlay in OVERLAYS:
        (directory / f"{overlay}.yaml").write_text(yaml.safe_dump_all(rendered[overlay], sort_keys=False))
    # --skip-download: offline, no Prisma Cloud guidelines (the checks themselves ship in the wheel).
    proc = subprocess.run([sys.executable, "-m", "checkov.main", "--directory", str(directory),
                           "--framework", "kubernetes", "--skip-download", "--output", "json"],
                          check=False, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def test_checkov_finds_no_failed_check_in_any_overlay(report):
    assert report["check_type"] == "kubernetes"
    summary = report["summary"]
    assert summary["parsing_errors"] == 0 and summary["resource_count"] >= 15 * len(OVERLAYS)
    assert summary["passed"] > 500
    failed = sorted({(c["check_id"], c["resource"], Path(c["file_path"]).name)
                     for c in report["results"]["failed_checks"]})
    assert failed == []


def test_every_skip_is_annotated_with_its_reason(report):
    skipped = report["results"]["skipped_checks"]
    assert skipped, "the manifests annotate CKV_K8S_43 (image pinned by tag); checkov should report it skipped"
    for check in skipped:
        assert len(check["check_result"]["suppress_comment"].strip()) > 40, check["check_id"]
    assert {c["check_id"] for c in skipped} == _annotated_skips()
