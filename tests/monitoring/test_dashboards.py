"""The Grafana dashboards and provisioning hold together without a Grafana binary:
schema basics, one datasource uid, valid PromQL (promtool parses every query),
and the panels the issue asks for."""
from __future__ import annotations

import itertools
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support import promql

PROVISIONING = promql.MONITORING / "grafana" / "provisioning"
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range", "__interval_ms", "__range_s"}
COMPOSE_DASHBOARDS_PATH = "/etc/grafana/dashboards"   # where docker-compose.yml mounts monitoring/grafana/dashboards

BOARDS = promql.dashboards()


def provisioned_datasource() -> dict:
    sources = []
    for path in (PROVISIONING / "datasources").glob("*.yml"):
        sources += yaml.safe_load(path.read_text())["datasources"]
    assert len(sources) == 1
    return sources[0]


def test_the_datasource_is_prometheus_at_the_compose_service_with_a_fixed_uid():
    source = provisioned_datasource()
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", source["uid"])


def test_the_dashboard_provider_reads_the_directory_compose_mounts():
    providers = []
    for path in (PROVISIONING / "dashboards").glob("*.yml"):
        providers += yaml.safe_load(path.read_text())["providers"]
    assert [p["options"]["path"] for p in providers] == [COMPOSE_DASHBOARDS_PATH]
    assert all(p["type"] == "file" for p in providers)


def test_dashboards_have_distinct_uids_and_titles():
    assert len(BOARDS) >= 2
    uids = [board["uid"] for board in BOARDS.values()]
    titles = [board["title"] for board in BOARDS.values()]
    assert len(set(uids)) == len(uids) and len(set(titles)) == len(titles)
    assert all(isinstance(board.get("schemaVersion"), int) for board in BOARDS.values())


@pytest.mark.parametrize("name", BOARDS)
def test_panel_ids_are_unique_and_grid_positions_fit_without_overlap(name):
    board = BOARDS[name]
    all_panels = list(promql.panels(board))
    ids = [panel["id"] for panel in all_panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids in {name}"
    boxes = []
    for panel in all_panels:
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) and grid[k] >= 0 for k in "hwxy"), panel["title"]
        assert grid["w"] >= 1 and grid["h"] >= 1 and grid["x"] + grid["w"] <= 24, panel["title"]
        boxes.append((panel["title"], grid))
    for (t1, a), (t2, b) in itertools.combinations(boxes, 2):
        overlap = (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
                   and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])
        assert not overlap, f"{name}: panels {t1!r} and {t2!r} overlap"


@pytest.mark.parametrize("name", BOARDS)
def test_every_panel_and_target_uses_the_provisioned_datasource_uid(name):
    uid = provisioned_datasource()["uid"]
    for panel in promql.panels(BOARDS[name]):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": uid}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": uid}, panel["title"]
    for var in BOARDS[name]["templating"]["list"]:
        if var["type"] == "query":
            assert var["datasource"]["uid"] == uid


@pytest.mark.parametrize("name", BOARDS)
def test_every_panel_has_targets_each_with_an_expr_and_a_distinct_ref_id(name):
    for panel in promql.panels(BOARDS[name]):
        if panel["type"] == "row":
            continue
        assert panel["title"] and panel.get("description"), f"panel {panel['id']} needs a title and description"
        targets = panel["targets"]
        assert targets, panel["title"]
        assert all(t.get("expr", "").strip() for t in targets), panel["title"]
        ref_ids = [t["refId"] for t in targets]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]


@pytest.mark.parametrize("name", BOARDS)
def test_every_variable_an_expression_uses_is_defined(name):
    defined = {var["name"] for var in BOARDS[name]["templating"]["list"]} | GRAFANA_BUILTINS
    for item in promql.dashboard_exprs():
        if item.where.startswith(name):
            used = set(re.findall(r"\$\{?(\w+)", item.expr))
            assert used <= defined, f"{item.where} uses undefined {sorted(used - defined)}"


def test_the_model_dashboard_drills_down_by_a_model_variable():
    board = next(b for b in BOARDS.values() if b["uid"] == "tfs-model")
    variables = {var["name"]: var for var in board["templating"]["list"]}
    assert "model_name" in str(variables["model"]["query"])
    model_exprs = [e for e in promql.dashboard_exprs() if e.where.startswith("tfserving-model.json: panel")]
    # Every panel filters on the model, except the batch-queue line (no model label exists).
    unfiltered = [e.where for e in model_exprs if "$model" not in e.expr]
    assert unfiltered == ["tfserving-model.json: panel 'Where the time goes (mean)' target C"]


def test_the_overview_has_the_requested_panels():
    exprs = "\n".join(e.expr for e in promql.dashboard_exprs() if e.where.startswith("tfserving-overview.json"))
    for needle in (":tensorflow:serving:request_count", "histogram_quantile(0.99",
                   ":tensorflow:serving:runtime_latency", ":tensorflow:serving:batching_session:queuing_latency",
                   "processed_batch_size_bucket", "padding_size", ":tensorflow:cc:saved_model:load_attempt_count",
                   ":tensorflow:serving:model_warmup", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED",
                   "DCGM_FI_DEV_POWER_USAGE"):
        assert needle in exprs, needle


def test_promtool_parses_every_dashboard_query(tmp_path: Path, promtool: str):
    """Each query, with variables filled in, becomes a recording rule that promtool must parse."""
    values = {"__rate_interval": "1m", "instance": ".+", "model": "digits"}
    rules = []
    for index, item in enumerate(promql.dashboard_exprs()):
        variable_query = promql.label_values_query(item.expr)
        expr = promql.substitute(variable_query[0] if variable_query else item.expr, values)
        rules.append({"record": f"dashboard:query:{index}", "expr": expr})
    path = tmp_path / "dashboard_queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
