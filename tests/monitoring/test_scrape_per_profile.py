"""The compose stack's Prometheus scrapes what runs: the dcgm-exporter job only with the GPU profile.

One source (monitoring/prometheus/prometheus.yml); make up renders it for the services it starts. promtool
checks each render where it is installed (Debian's prometheus package; `make debs`).
"""
from __future__ import annotations

import shutil
import subprocess

import pytest

from serving.stack.scrape import SHIPPED_CONFIG, scrape_config_for, write_scrape_config

SERVICES = {"exporter", "tfserving", "gateway", "prometheus", "grafana", "dcgm-exporter"}


def jobs(config: dict) -> list[str]:
    return [job["job_name"] for job in config["scrape_configs"]]


def test_the_gpu_profile_keeps_every_job_of_the_shipped_file():
    assert jobs(scrape_config_for(SERVICES, SERVICES)) == ["tfserving", "dcgm-exporter", "prometheus"]


def test_without_the_gpu_profile_there_is_no_dcgm_job():
    cpu = scrape_config_for(SERVICES - {"dcgm-exporter"}, SERVICES)
    assert jobs(cpu) == ["tfserving", "prometheus"]
    assert cpu["rule_files"] == ["rules/*.yml"]  # relative: the rules are mounted beside it


@pytest.mark.parametrize("started", [SERVICES, SERVICES - {"dcgm-exporter"}], ids=["gpu", "cpu"])
def test_promtool_accepts_each_render(started, tmp_path):
    promtool = shutil.which("promtool") or shutil.which("promtool", path="/usr/sbin:/usr/bin")
    if promtool is None:
        pytest.skip("promtool is not installed (make debs installs Debian's prometheus package)")
    shutil.copytree(SHIPPED_CONFIG.parent / "rules", tmp_path / "rules")
    path = write_scrape_config(scrape_config_for(started, SERVICES), tmp_path / "prometheus.yml")
    proc = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
