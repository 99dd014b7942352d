"""promtool (Prometheus 2.42, Debian's package) accepts the config and rules, and
the rule unit tests in monitoring/prometheus/tests/ pass; every alert is
unit-tested both firing and silent, and documents itself."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from monitoring.local import render_config, write_config
from tests.support import promql

PROMETHEUS_YML = promql.MONITORING / "prometheus" / "prometheus.yml"
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.usefixtures("promtool")   # fails where promtool is missing


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120)


def test_promtool_check_config_accepts_the_shipped_prometheus_yml_and_its_rules():
    result = promtool("check", "config", str(PROMETHEUS_YML))
    assert result.returncode == 0, result.stdout + result.stderr
    # rule_files resolve relative to prometheus.yml: both rule files were found and checked.
    for rule_file in promql.RULES_DIR.glob("*.yml"):
        assert rule_file.name in result.stdout


def test_promtool_check_rules_accepts_every_rule_file():
    files = sorted(str(p) for p in promql.RULES_DIR.glob("*.yml"))
    result = promtool("check", "rules", *files)
    assert result.returncode == 0, result.stdout + result.stderr
    found = sum(int(n) for n in re.findall(r"SUCCESS: (\d+) rules found", result.stdout))
    assert found == len(promql.rules())


def test_promtool_rule_unit_tests_pass():
    files = sorted(str(p) for p in promql.PROMTOOL_TESTS_DIR.glob("*.yml"))
    assert len(files) >= 2
    result = promtool("test", "rules", *files)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAILED" not in result.stdout


def test_promtool_rule_unit_tests_fail_when_an_alert_threshold_is_broken(tmp_path):
    """The unit tests can fail: with the server-error threshold raised they must."""
    rules = tmp_path / "rules"
    rules.mkdir()
    for path in promql.RULES_DIR.glob("*.yml"):
        text = path.read_text().replace("ratio_rate5m > 0.01\n", "ratio_rate5m > 0.5\n")
        (rules / path.name).write_text(text)
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(promql.PROMTOOL_TESTS_DIR / "alerts_test.yml", tests / "alerts_test.yml")
    result = promtool("test", "rules", str(tests / "alerts_test.yml"))
    assert result.returncode != 0
    assert "TFServingServerErrors" in result.stdout + result.stderr


def _alert_tests() -> list[dict]:
    cases = []
    for path in promql.PROMTOOL_TESTS_DIR.glob("*.yml"):
        for test in yaml.safe_load(path.read_text())["tests"]:
            cases.extend(test.get("alert_rule_test", []))
    return cases


@pytest.mark.parametrize("alert", [r["alert"] for r in promql.alert_rules()])
def test_every_alert_has_a_firing_and_a_silent_unit_test(alert):
    cases = [case for case in _alert_tests() if case["alertname"] == alert]
    assert any(case.get("exp_alerts") for case in cases), f"{alert}: no unit test where it fires"
    assert any(not case.get("exp_alerts") for case in cases), f"{alert}: no unit test where it stays silent"


@pytest.mark.parametrize("rule", promql.alert_rules(), ids=lambda r: r["alert"])
def test_every_alert_has_severity_summary_description_and_an_existing_runbook_section(rule):
    assert rule["labels"]["severity"] in {"critical", "warning"}
    annotations = rule["annotations"]
    assert annotations["summary"] and annotations["description"]
    path, _, anchor = annotations["runbook_url"].partition("#")
    runbook = promql.MONITORING.parent / path
    assert runbook.is_file(), f"{rule['alert']}: runbook {path} does not exist"
    headings = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
                for h in re.findall(r"^#+ (.+)$", runbook.read_text(), re.M)}
    assert anchor in headings, f"{rule['alert']}: no section #{anchor} in {path}"


def test_recording_rule_names_follow_level_metric_operations():
    for rule in promql.rules():
        if "record" in rule:
            assert re.fullmatch(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", rule["record"]), rule["record"]


def test_the_config_rendered_for_a_local_prometheus_passes_promtool(tmp_path: Path):
    config = render_config(tfserving=["127.0.0.1:8501"], prometheus="127.0.0.1:9090",
                           scrape_interval="1s", evaluation_interval="1s")
    path = write_config(config, tmp_path / "prometheus.yml")
    result = promtool("check", "config", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"tfserving", "prometheus"}          # no DCGM exporter unless asked for
    assert jobs["tfserving"]["static_configs"] == [{"targets": ["127.0.0.1:8501"]}]
    assert jobs["tfserving"]["metrics_path"] == "/monitoring/prometheus/metrics"
    assert config["rule_files"] == [str(promql.RULES_DIR / "*.yml")]
