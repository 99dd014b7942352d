"""Every metric the dashboards and rules read is one real TF Serving exports.

The embedded server is built to the same names, but the point of this test is
the real ``tensorflow_model_server``: the catalogue below is written from
TF Serving's sources (its own metrics, e.g. ``servables/tensorflow/util.cc``'s
request_count, exported by ``util/prometheus_exporter.cc``) and TF core's
SavedModel loader (``/tensorflow/cc/saved_model/...``), with the DCGM exporter's default counters and
Prometheus' ``up``. Recorded series must be defined by a rule here.
"""
from __future__ import annotations

import pytest

from tests.support import promql

# Prometheus name -> (type, labels), from tf-serving.md §1.3/§1.4.
TF_SERVING_METRICS = {
    ":tensorflow:serving:request_count": ("counter", {"model_name", "status"}),
    ":tensorflow:serving:request_latency": ("histogram", {"model_name", "API", "entrypoint"}),
    ":tensorflow:serving:runtime_latency": ("histogram", {"model_name", "API", "runtime"}),
    ":tensorflow:serving:request_example_counts": ("histogram", {"model"}),
    ":tensorflow:serving:request_example_count_total": ("counter", {"model"}),
    ":tensorflow:serving:batching_session:queuing_latency": ("histogram", {"thread_pool_name"}),
    ":tensorflow:serving:batching_session:wrapped_run_count": ("counter", set()),
    ":tensorflow:serving:batching_session:input_batch_size": ("histogram", set()),
    ":tensorflow:serving:batching_session:processed_batch_size": ("histogram", set()),
    ":tensorflow:serving:batching_session:padding_size": ("histogram", {"execution_batch_size"}),
    ":tensorflow:serving:model_warmup_latency": ("histogram", {"model_path", "status"}),
    ":tensorflow:serving:model_warmup_records_read": ("counter", {"model_path", "status"}),
    ":tensorflow:serving:request_log_count": ("counter", {"model_name", "status_code"}),
    ":tensorflow:cc:saved_model:load_attempt_count": ("counter", {"model_path", "status"}),
    ":tensorflow:cc:saved_model:load_latency": ("counter", {"model_path"}),
    ":tensorflow:cc:saved_model:load_latency_by_stage": ("histogram", {"model_path", "stage"}),
}
# NVIDIA dcgm-exporter default counters (etc/default-counters.csv); labels per GPU.
DCGM_LABELS = {"gpu", "UUID", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION", "pci_bus_id"}
DCGM_METRICS = {name: ("gauge", DCGM_LABELS) for name in (
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK")}
PROMETHEUS_METRICS = {"up": ("gauge", set())}
# Attached by Prometheus to every scraped series.
TARGET_LABELS = {"job", "instance"}


def exported_series() -> dict[str, set[str]]:
    """Every series name a scrape can contain -> its labels (histograms expanded)."""
    series = {}
    for name, (kind, labels) in {**TF_SERVING_METRICS, **DCGM_METRICS, **PROMETHEUS_METRICS}.items():
        if kind == "histogram":
            series[f"{name}_bucket"] = labels | {"le"}
            series[f"{name}_sum"] = set(labels)
            series[f"{name}_count"] = set(labels)
        else:
            series[name] = set(labels)
    return {name: labels | TARGET_LABELS for name, labels in series.items()}


ALL_EXPRS = promql.dashboard_exprs() + promql.rule_exprs()


def test_the_name_extractor_finds_names_and_skips_functions_labels_and_keywords():
    expr = ('sum by (model_name) (rate(:tensorflow:serving:request_count{status!="OK", le=~`1e6`}[5m]))\n'
            '  / on (model_name) group_left foo:bar:rate5m offset 1h or vector(1) * 1e6')
    assert promql.metric_names(expr) == {":tensorflow:serving:request_count", "foo:bar:rate5m"}
    assert promql.metric_names('label_values(up{job="tfserving"}, instance)') == {"up"}


def test_dashboards_and_rules_have_expressions_to_check():
    assert len(promql.dashboard_exprs()) >= 20 and len(promql.rule_exprs()) >= 20


@pytest.mark.parametrize("item", ALL_EXPRS, ids=lambda e: e.where)
def test_every_metric_read_is_exported_by_tf_serving_dcgm_or_a_rule(item):
    known = SERIES.keys() | RECORDED
    unknown = promql.metric_names(item.expr) - known
    assert not unknown, f"{item.where} reads {sorted(unknown)}, which neither TF Serving, DCGM nor a rule exports"


@pytest.mark.parametrize("item", ALL_EXPRS, ids=lambda e: e.where)
def test_label_matchers_on_exported_metrics_use_labels_those_metrics_have(item):
    for name, labels in promql.selectors(item.expr):
        if name in SERIES:
            wrong = set(labels) - SERIES[name]
            assert not wrong, f"{item.where}: {name} has no label(s) {sorted(wrong)}"


@pytest.mark.parametrize("item", ALL_EXPRS, ids=lambda e: e.where)
def test_grouping_labels_exist_on_some_metric_of_the_expression(item):
    available = set(TARGET_LABELS)
    for name in promql.metric_names(item.expr):
        available |= SERIES.get(name, set())
        if name in RECORDED:
            available |= _recorded_labels(name)
    missing = promql.grouping_labels(item.expr) - available
    assert not missing, f"{item.where} groups by {sorted(missing)}, which no series it reads carries"


def _recorded_labels(record: str, rules: list[dict] | None = None) -> set[str]:
    """Labels a recorded series keeps: its rule's grouping labels plus static labels."""
    rules = RULES if rules is None else rules
    recorded = {rule["record"] for rule in rules if "record" in rule}
    labels = set()
    for rule in rules:
        if rule.get("record") != record:
            continue
        grouping = promql.grouping_labels(rule["expr"])
        labels |= grouping | set(rule.get("labels", {}))
        for name in promql.metric_names(rule["expr"]):
            if name in recorded and name != record:
                labels |= _recorded_labels(name, rules)
            elif not grouping:   # no aggregation: the source series' labels survive
                labels |= SERIES.get(name, set())
    return labels


RULES = promql.rules()
RECORDED = promql.recorded_names()
SERIES = exported_series()
