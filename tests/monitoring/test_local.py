"""``python -m monitoring.local`` runs Debian's Prometheus with the shipped rules
against loopback targets (what ``make monitor`` runs)."""
from __future__ import annotations

import sys
import time

import httpx
import pytest

from serving.checkout import REPO_ROOT
from tests.support import promql
from tests.support.ports import free_port
from tests.support.processes import LoggedProcess, http_ready

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prometheus")]   # runs a real Prometheus


def test_monitoring_local_serves_prometheus_with_the_shipped_rules_and_loopback_targets(tmp_path):
    port, tfserving_port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    prometheus = LoggedProcess(
        [sys.executable, "-m", "monitoring.local", f"--listen=127.0.0.1:{port}", f"--storage={tmp_path}",
         f"--rest=http://127.0.0.1:{tfserving_port}", "--scrape-interval=1s"],
        tmp_path / "monitoring-local.log", cwd=REPO_ROOT)
    prometheus.start(http_ready(f"{base}/-/ready"), "python -m monitoring.local", 60)
    try:
        groups = httpx.get(f"{base}/api/v1/rules", timeout=10).json()["data"]["groups"]
        loaded = {rule["name"] for group in groups for rule in group["rules"]}
        shipped = {rule.get("record") or rule.get("alert") for rule in promql.rules()}
        assert loaded == shipped
        urls: set[str] = set()
        while len(urls) < 2 and time.monotonic() < deadline:   # discovery runs just after ready
            time.sleep(0.2)
            targets = httpx.get(f"{base}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
            urls = {t["scrapeUrl"] for t in targets}
        assert f"http://127.0.0.1:{tfserving_port}/monitoring/prometheus/metrics" in urls
        assert f"http://127.0.0.1:{port}/metrics" in urls
        assert (tmp_path / "prometheus.yml").is_file()
    finally:
        prometheus.stop(30)
