"""The compose file mounts the monitoring files where they expect to be, and the
scrape targets name its services (no Docker needed: the YAML is read as data)."""
from __future__ import annotations

import posixpath
import re

import yaml

from serving.checkout import REPO_ROOT
from tests.support import promql

COMPOSE = REPO_ROOT / "docker-compose.yml"


def services() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def _defaults(text: str) -> str:
    """``${NAME:-default}`` as its default (what a checkout without make up's variables mounts)."""
    return re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*:-([^}]*)\}", r"\1", text)


def mounts(service: dict) -> dict[str, str]:
    """host path (normalised, relative to the repo) -> container path."""
    found = {}
    for volume in service.get("volumes", []):  # short syntax ("src:dst[:ro]") or long ({source:, target:})
        source, target = ((_defaults(volume["source"]), volume["target"]) if isinstance(volume, dict)
                          else _defaults(volume).split(":")[:2])
        found[posixpath.normpath(source)] = target
    return found


def test_prometheus_finds_its_rules_beside_its_config_in_the_container():
    prometheus = mounts(services()["prometheus"])
    config_path = prometheus["monitoring/prometheus/prometheus.yml"]
    rules_path = prometheus["monitoring/prometheus/rules"]
    shipped = yaml.safe_load((promql.MONITORING / "prometheus" / "prometheus.yml").read_text())
    assert shipped["rule_files"] == ["rules/*.yml"]
    assert posixpath.join(posixpath.dirname(config_path), "rules") == rules_path


def test_grafana_reads_the_provisioning_and_the_dashboards_from_the_mounted_directories():
    grafana = mounts(services()["grafana"])
    assert grafana["monitoring/grafana/provisioning"] == "/etc/grafana/provisioning"
    provider = yaml.safe_load(
        (promql.MONITORING / "grafana" / "provisioning" / "dashboards" / "tfs-stack.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == grafana["monitoring/grafana/dashboards"]


def test_scrape_targets_are_compose_services_on_their_ports():
    shipped = yaml.safe_load((promql.MONITORING / "prometheus" / "prometheus.yml").read_text())
    names = services().keys()
    for job in shipped["scrape_configs"]:
        for target in job["static_configs"][0]["targets"]:
            host = target.split(":")[0]
            assert host == "localhost" or host in names, f"{job['job_name']} scrapes {target}"
    tfserving = services()["tfserving"]["command"]
    assert "--rest_api_port=8501" in tfserving
    assert any(arg.startswith("--monitoring_config_file=") for arg in tfserving)


def test_the_metrics_path_scraped_is_the_one_tf_serving_is_configured_with():
    from serving.config import load_monitoring_config

    tfserving = services()["tfserving"]
    flag = next(a for a in tfserving["command"] if a.startswith("--monitoring_config_file="))
    container_path = flag.split("=", 1)[1]
    host_dir, container_dir = next((h, c) for h, c in mounts(tfserving).items()
                                   if container_path.startswith(c + "/"))
    config = load_monitoring_config(REPO_ROOT / host_dir / posixpath.relpath(container_path, container_dir))
    shipped = yaml.safe_load((promql.MONITORING / "prometheus" / "prometheus.yml").read_text())
    job = next(j for j in shipped["scrape_configs"] if j["job_name"] == "tfserving")
    assert config.prometheus_config.enable
    assert job["metrics_path"] == (config.prometheus_config.path or "/monitoring/prometheus/metrics")
