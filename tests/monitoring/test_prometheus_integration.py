"""Every dashboard query and recording rule returns data from a real scrape.

A real Prometheus (Debian's ``prometheus``), started here on a free port with
the shipped config rendered for loopback (1 s scrape and rule evaluation) and
the shipped rule files, scrapes the embedded server (``python -m
serving.server`` with ``--enable_batching`` and a monitoring config) serving
digits, text and ranker while a bounded load runs over gRPC and REST: good
requests, malformed ones (INVALID_ARGUMENT) and requests for a model that is
not served (NOT_FOUND). A version 2 of digits whose SavedModel is garbage is
published mid-test, so a real load failure is recorded.

Then every panel query (variables filled in: ``$model=digits``,
``$instance=.+``, ``$__rate_interval=15s``) and every recording rule is
evaluated through ``/api/v1/query`` and must return at least one finite value.
Nothing is mocked. Excepted, and listed explicitly in ``GPU_ONLY``: the DCGM
(GPU) queries, because this machine has no GPU and no dcgm-exporter; they are
checked to be empty rather than skipped silently. Queries reading only a TF
Serving metric the embedded server does not export yet
(``KNOWN_EMBEDDED_SERVER_GAPS``) are excused with a warning while it is absent.

Alerts: Prometheus loads a copy of the alert rules whose ``for:`` is 2 s
(thresholds and windows unchanged; ``prometheus_process.shorten_alert_for``).
``TFServingModelLoadFailed`` has no ``for:`` at all in production, so its
firing is exactly what production would see.
"""
from __future__ import annotations

import itertools
import re
import shutil
import threading
import time
import warnings
from pathlib import Path

import grpc
import httpx
import pytest

from monitoring.local import render_config
from tests.support import promql
from tests.support.prometheus import PrometheusProcess, shorten_alert_for
from tests.support.ports import free_port
from tests.support.servers import EmbeddedServer

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prometheus")]

MODELS = ("digits", "text", "ranker")
NOT_SERVED = "retired_model"
UNSERVED_LABEL = ""  # what the embedded server records for a model name it does not serve
VARIABLES = {"model": "digits", "instance": ".+", "__rate_interval": "15s"}
GPU_ONLY = {
    "tfserving-overview.json: panel 'GPU utilisation' target A",
    "tfserving-overview.json: panel 'GPU framebuffer memory' target A",
    "tfserving-overview.json: panel 'GPU framebuffer memory' target B",
    "tfserving-overview.json: panel 'GPU power' target A",
    "tfserving-recording.yml: gpu:dcgm_fb_used:ratio",
}
# TF Serving metric families the embedded server does not export yet. Queries reading
# only these may be empty, with a warning; once the server exports a family its
# queries are checked like every other. Nothing else is excused.
KNOWN_EMBEDDED_SERVER_GAPS = {":tensorflow:serving:runtime_latency"}
LOAD_SECONDS = 120         # upper bound on the load's duration
LOAD_MAX_REQUESTS = 6000   # upper bound on its size
LOAD_PAUSE = 0.1           # seconds each of the 4 threads waits between requests (~40 req/s)
CHECK_DEADLINE = 60        # seconds to wait for every query to return data


def _batching_parameters() -> str:
    """Batching sized like the project's: the exporter warms up every allowed batch size
    (``exporter.warmup.allowed_batch_sizes``), so the largest must fit in a batch."""
    from exporter.warmup import allowed_batch_sizes

    sizes = allowed_batch_sizes()
    lines = [f"max_batch_size {{ value: {max(sizes)} }}", "batch_timeout_micros { value: 2000 }",
             "max_enqueued_batches { value: 64 }", "num_batch_threads { value: 2 }"]
    return "\n".join(lines + [f"allowed_batch_sizes: {size}" for size in sizes]) + "\n"


def _write_configs(root: Path, repo: Path) -> list[str]:
    models = "\n".join(
        f'  config {{ name: "{m}" base_path: "{repo / m}" model_platform: "tensorflow" }}' for m in MODELS)
    (root / "models.config").write_text(f"model_config_list {{\n{models}\n}}\n")
    (root / "batching.config").write_text(_batching_parameters())
    (root / "monitoring.config").write_text(
        'prometheus_config { enable: true, path: "/monitoring/prometheus/metrics" }\n')
    return [f"--model_config_file={root / 'models.config'}", "--enable_batching",
            f"--batching_parameters_file={root / 'batching.config'}",
            f"--monitoring_config_file={root / 'monitoring.config'}",
            "--file_system_poll_wait_seconds=1", "--max_num_load_retries=0"]


class Load:
    """Bounded mixed traffic on a few threads: good gRPC and REST predicts for every
    model (digits with 3 rows, which batching pads), malformed REST bodies for text,
    NOT_FOUND for a model that is not served."""

    def __init__(self, server: EmbeddedServer, repo: Path, threads: int = 4) -> None:
        from loadtest.payloads import Target, build_payload
        from serving.wire import serving_apis_pb2 as apis

        self.server = server
        self.payloads = [build_payload(Target(model=m, model_repo=repo, batch_size=3 if m == "digits" else 1))
                         for m in MODELS]
        missing = apis.PredictRequest.FromString(self.payloads[0].grpc_request)
        missing.model_spec.name = NOT_SERVED
        self.missing_grpc = missing.SerializeToString()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        self.stop_event = threading.Event()
        self.counter = itertools.count()
        self.outcomes: dict[str, int] = {}
        self.lock = threading.Lock()
        self.deadline = time.monotonic() + LOAD_SECONDS

    def start(self) -> "Load":
        for thread in self.threads:
            thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(60)

    def _count(self, outcome: str) -> None:
        with self.lock:
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def _run(self) -> None:
        channel = grpc.insecure_channel(self.server.grpc_target)
        rest = httpx.Client(base_url=self.server.rest_url, timeout=30.0)
        try:
            while not self.stop_event.is_set() and time.monotonic() < self.deadline:
                n = next(self.counter)
                if n >= LOAD_MAX_REQUESTS:
                    return
                self._one(n, channel, rest)
                self.stop_event.wait(LOAD_PAUSE)   # paced, so traffic lasts while queries run
        finally:
            channel.close()
            rest.close()

    def _one(self, n: int, channel: grpc.Channel, rest: httpx.Client) -> None:
        payload = self.payloads[n % len(self.payloads)]
        kind = n % 8
        if kind in (0, 1, 2):
            call = channel.unary_unary(payload.grpc_method)
            try:
                call(payload.grpc_request, timeout=30)
                self._count("grpc OK")
            except grpc.RpcError as error:
                self._count(f"grpc {error.code().name}")
        elif kind in (3, 4, 5):
            response = rest.post(payload.rest_path, content=payload.rest_body)
            self._count(f"rest {response.status_code}")
        elif kind == 6:
            response = rest.post("/v1/models/text:predict", content=b'{"instances": [')
            self._count(f"rest malformed {response.status_code}")
        else:
            response = rest.post(f"/v1/models/{NOT_SERVED}:predict", content=payload.rest_body)
            self._count(f"rest missing {response.status_code}")
            try:
                channel.unary_unary(payload.grpc_method)(self.missing_grpc, timeout=30)
            except grpc.RpcError as error:
                self._count(f"grpc missing {error.code().name}")


@pytest.fixture(scope="module")
def stack(model_repo, tmp_path_factory):
    """The embedded server under load, scraped by a real Prometheus."""
    root = tmp_path_factory.mktemp("monitoring-stack")
    repo = root / "models"
    shutil.copytree(model_repo, repo, ignore=shutil.ignore_patterns(".lock"))
    with EmbeddedServer(_write_configs(root, repo), wait_for=MODELS, log_path=root / "server.log") as server:
        rules = shorten_alert_for(promql.RULES_DIR, root / "rules", "2s")
        port = free_port()
        config = render_config(tfserving=[f"127.0.0.1:{server.rest_port}"], prometheus=f"127.0.0.1:{port}",
                               rules_dir=rules, scrape_interval="1s", evaluation_interval="1s")
        with PrometheusProcess(config, root / "prometheus", port=port) as prometheus:
            load = Load(server, repo).start()
            try:
                _publish_broken_version(repo / "digits" / "2")
                yield server, prometheus, load
            finally:
                load.stop()


def _publish_broken_version(version_dir: Path) -> None:
    """A version whose saved_model.pb is not a SavedModel: its load must fail."""
    staging = version_dir.with_name(".staging-2")
    (staging / "variables").mkdir(parents=True)
    (staging / "saved_model.pb").write_bytes(b"this is not a SavedModel")
    staging.rename(version_dir)


def _wait_for(check, deadline_s: float, interval: float = 1.0):
    """Call ``check()`` until it returns a falsy 'what is missing', or the deadline passes."""
    deadline = time.monotonic() + deadline_s
    missing = check()
    while missing and time.monotonic() < deadline:
        time.sleep(interval)
        missing = check()
    return missing


def _query_exprs() -> list[promql.Expr]:
    exprs = []
    for item in promql.dashboard_exprs() + promql.rule_exprs():
        if item.where.split(": ", 1)[0].endswith("alerts.yml"):
            continue    # alert conditions are meant to be empty; alerts are checked below
        exprs.append(item)
    return exprs


def _evaluable(item: promql.Expr) -> str:
    variable_query = promql.label_values_query(item.expr)
    return promql.substitute(variable_query[0] if variable_query else item.expr, VARIABLES)


def test_the_gpu_exceptions_are_exactly_the_dcgm_queries():
    assert {item.where for item in _query_exprs() if item.gpu} == GPU_ONLY


def test_prometheus_scrapes_the_embedded_server_at_tf_servings_metrics_path(stack):
    server, prometheus, _ = stack

    def unhealthy():
        targets = prometheus.targets()
        return [t["scrapeUrl"] for t in targets if t["health"] != "up"] or not targets

    assert not _wait_for(unhealthy, 30)
    urls = [t["scrapeUrl"] for t in prometheus.targets()]
    assert f"http://127.0.0.1:{server.rest_port}/monitoring/prometheus/metrics" in urls


def _families(expr: str) -> set[str]:
    return {re.sub(r"_(bucket|sum|count)$", "", name) for name in promql.metric_names(expr)}


def _unexported_gaps(server: EmbeddedServer) -> set[str]:
    """Families of KNOWN_EMBEDDED_SERVER_GAPS with no sample on the server's metrics page."""
    page = httpx.get(f"{server.rest_url}/monitoring/prometheus/metrics", timeout=30).text
    return {family for family in KNOWN_EMBEDDED_SERVER_GAPS
            if not re.search(rf"^{re.escape(family)}(_bucket|_sum|_count)?{{", page, re.M)}


def test_every_dashboard_query_and_recording_rule_returns_data(stack):
    server, prometheus, load = stack
    gaps = _unexported_gaps(server)
    excused = [item for item in _query_exprs() if not item.gpu and _families(item.expr) & gaps]
    if excused:
        warnings.warn(f"the embedded server does not export {sorted(gaps)}; not proven: "
                      f"{[item.where for item in excused]}", stacklevel=2)
    items = [item for item in _query_exprs() if not item.gpu and item not in excused]

    def empty():
        return [item.where for item in items if not prometheus.finite_results(_evaluable(item))]

    missing = _wait_for(empty, CHECK_DEADLINE, interval=2.0)
    assert not missing, f"no finite data for {missing}\nload outcomes: {load.outcomes}"
    # Recording rules also exist as recorded series, with their static labels.
    for rule in promql.rules():
        if "record" in rule and rule["record"] != "gpu:dcgm_fb_used:ratio" and not _families(rule["expr"]) & gaps:
            selector = ",".join(f'{k}="{v}"' for k, v in rule.get("labels", {}).items())
            assert prometheus.query(f"{rule['record']}{{{selector}}}"), rule["record"]
    print(f"\n{len(items)} queries returned finite data; GPU-only (no DCGM here): {sorted(GPU_ONLY)}; "
          f"excused as embedded-server gaps: {len(excused)}")
    print(f"load outcomes: {load.outcomes}")


def test_every_rule_evaluates_without_error_on_live_data(stack):
    """Errors promtool cannot see statically (e.g. many-to-many matches) show up here."""
    _, prometheus, _ = stack

    def unhealthy():
        rules = prometheus.rules()
        return [(r["name"], r["health"], r.get("lastError")) for r in rules if r["health"] != "ok"] or not rules

    assert not _wait_for(unhealthy, 30)
    assert len(prometheus.rules()) == len(promql.rules())


def test_the_gpu_queries_are_empty_without_a_dcgm_exporter(stack):
    _, prometheus, _ = stack
    for item in _query_exprs():
        if item.gpu:
            assert prometheus.query(_evaluable(item)) == [], item.where


def test_the_model_variable_lists_every_served_model(stack):
    _, prometheus, _ = stack
    query = next(e for e in promql.dashboard_exprs() if e.where.endswith("variable $model"))
    series_expr, label = promql.label_values_query(query.expr)

    def missing_models():
        seen = {r["metric"].get(label) for r in prometheus.query(promql.substitute(series_expr, VARIABLES))}
        return set(MODELS) - seen

    assert not _wait_for(missing_models, 30)


def test_injected_failures_fire_their_alerts_and_nothing_else_fires(stack):
    _, prometheus, load = stack
    expected = {
        ("TFServingModelLoadFailed", "model_path"),      # digits/2 is garbage
        ("TFServingModelNotAvailable", "model_name"),    # only NOT_FOUND for retired_model
        ("TFServingHighRequestErrorRatio", "model_name"),  # malformed requests for text and retired_model
    }

    def not_firing():
        firing = {(a["labels"]["alertname"]) for a in prometheus.alerts() if a["state"] == "firing"}
        return {name for name, _ in expected} - firing

    assert not _wait_for(not_firing, CHECK_DEADLINE, interval=2.0), load.outcomes
    firing = [a for a in prometheus.alerts() if a["state"] == "firing"]
    by_name = {}
    for alert in firing:
        by_name.setdefault(alert["labels"]["alertname"], []).append(alert["labels"])
    assert any(labels["model_path"].endswith("/digits/2") for labels in by_name["TFServingModelLoadFailed"])
    # Prometheus drops a label whose value is empty: a missing model_name is the unserved label.
    # The embedded server counts a model it does not serve under model_name="" (bounded labels; TF
    # Serving would label it with the name the request gave, NOT_SERVED).
    assert [labels.get("model_name", "") for labels in by_name["TFServingModelNotAvailable"]] == [UNSERVED_LABEL]
    assert "text" in {labels.get("model_name", "") for labels in by_name["TFServingHighRequestErrorRatio"]}
    # No server-side errors were injected and every target is up.
    assert not {"TFServingServerErrors", "TFServingTargetDown", "TFServingBatchQueueFull"} & set(by_name)
    print(f"\nfiring: { {name: len(v) for name, v in by_name.items()} }")
