"""ServerMetrics renders TF Serving's Prometheus page: names, types, labels, buckets."""
from __future__ import annotations

import math
import threading

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from serving.server import metrics as metrics_module
from serving.server.metrics import ServerMetrics, exponential_buckets, prometheus_name
from serving.status import Code, InvalidArgument

# TF metric names from docs tf-serving.md §1.3 / §1.4 (TF Serving util.cc, batching_session.cc,
# batching_util.h, saved_model_warmup_util.cc; TF core cc/saved_model/loader.cc).
REFERENCE_TF_NAMES = {
    "/tensorflow/serving/request_count": "counter",
    "/tensorflow/serving/request_latency": "histogram",
    "/tensorflow/serving/runtime_latency": "histogram",
    "/tensorflow/serving/request_example_counts": "histogram",
    "/tensorflow/serving/request_example_count_total": "counter",
    "/tensorflow/serving/batching_session/queuing_latency": "histogram",
    "/tensorflow/serving/batching_session/wrapped_run_count": "counter",
    "/tensorflow/serving/batching_session/input_batch_size": "histogram",
    "/tensorflow/serving/batching_session/processed_batch_size": "histogram",
    "/tensorflow/serving/batching_session/padding_size": "histogram",
    "/tensorflow/serving/saved_model_with_batching/queuing_latency": "histogram",
    "/tensorflow/serving/model_warmup_latency": "histogram",
    "/tensorflow/serving/model_warmup_records_read": "counter",
    "/tensorflow/serving/request_log_count": "counter",
    "/tensorflow/serving/mlmd_map": "gauge",
    "/tensorflow/cc/saved_model/load_attempt_count": "counter",
    "/tensorflow/cc/saved_model/load_latency": "counter",
    "/tensorflow/cc/saved_model/load_latency_by_stage": "histogram",
}
REFERENCE = {prometheus_name(name): kind for name, kind in REFERENCE_TF_NAMES.items()}

# (family, label names without le, TF bucket spec) for every histogram we export.
HISTOGRAMS = {
    ":tensorflow:serving:request_latency": (["model_name", "API", "entrypoint"], (10, 1.8, 33)),
    ":tensorflow:serving:runtime_latency": (["model_name", "API", "runtime"], (10, 1.8, 33)),
    ":tensorflow:serving:request_example_counts": (["model"], (1, 2, 15)),
    ":tensorflow:serving:batching_session:queuing_latency": (["thread_pool_name"], (100, 1.2, 52)),
    ":tensorflow:serving:batching_session:input_batch_size": ([], (1, 2, 14)),
    ":tensorflow:serving:batching_session:processed_batch_size": ([], (1, 2, 14)),
    ":tensorflow:serving:batching_session:padding_size": (["execution_batch_size"], (1, 2, 14)),
    ":tensorflow:serving:model_warmup_latency": (["model_path", "status"], (10, 1.8, 33)),
}
COUNTERS = {
    ":tensorflow:serving:request_count": ["model_name", "status"],
    ":tensorflow:serving:request_example_count_total": ["model"],
    ":tensorflow:serving:batching_session:wrapped_run_count": [],
    ":tensorflow:serving:model_warmup_records_read": ["model_path", "status"],
    ":tensorflow:cc:saved_model:load_attempt_count": ["model_path", "status"],
    ":tensorflow:cc:saved_model:load_latency": ["model_path"],
}


def record_one_of_everything(metrics: ServerMetrics) -> None:
    metrics.record_request("digits", "Predict", "GRPC", Code.OK, 1500.0)
    metrics.record_runtime("digits", "Predict", 900.0)
    metrics.record_examples("text", 3)
    metrics.record_load("/models/digits/1", True, 2_500_000)
    metrics.record_warmup("/models/digits/1", True, 40_000, 5)
    metrics.record_input_batch_size(3)
    metrics.record_queuing_latency("model_server_batch_threads", 250.0)
    metrics.record_batch(8, 2)
    metrics.record_wrapped_run()


def declared(page: str) -> dict:
    """Family name -> type, exactly as the page's ``# TYPE`` lines spell them."""
    return {line.split()[2]: line.split()[3] for line in page.splitlines() if line.startswith("# TYPE ")}


def families(metrics: ServerMetrics) -> dict:
    """Parsed families keyed by the name on the page (the parser drops a counter's ``_total``)."""
    page = metrics.render().decode()
    names = declared(page)
    parsed = {}
    for family in text_string_to_metric_families(page):
        original = family.name
        key = original if original in names else original + "_total"
        family.samples = [s._replace(name=key) if s.name == original + "_total" else s
                          for s in family.samples]
        family.name = key
        parsed[key] = family
    return parsed


def samples(family, suffix: str = "") -> list:
    return [s for s in family.samples if s.name == family.name + suffix]


@pytest.fixture
def metrics() -> ServerMetrics:
    return ServerMetrics(CollectorRegistry())


def test_public_api_is_pinned():
    assert metrics_module.__all__ == [
        "CONTENT_TYPE", "UNSERVED_MODEL_LABEL", "ServerMetrics", "exponential_buckets", "prometheus_name", "render_registry",
        "CAPTURE_OUTCOMES", "CAPTURE_STOP_REASONS", "CaptureCounts", "CaptureMetrics"]


def test_every_family_has_tf_serving_name_and_type(metrics):
    record_one_of_everything(metrics)
    expected = {**{name: "histogram" for name in HISTOGRAMS}, **{name: "counter" for name in COUNTERS}}
    assert declared(metrics.render().decode()) == expected


def test_every_exported_name_appears_in_the_tf_serving_reference_list(metrics):
    record_one_of_everything(metrics)
    for name, kind in declared(metrics.render().decode()).items():
        assert REFERENCE.get(name) == kind, name


def test_page_has_type_lines_only_and_counters_have_no_total_or_created_suffix(metrics):
    record_one_of_everything(metrics)
    page = metrics.render().decode()
    assert "# HELP" not in page
    assert "_total{" not in page.replace("request_example_count_total{", "")
    assert "_created" not in page
    assert ':tensorflow:serving:request_count{model_name="digits",status="OK"} 1\n' in page
    assert ":tensorflow:serving:batching_session:wrapped_run_count{} 1\n" in page
    comment_lines = [line for line in page.splitlines() if line.startswith("#")]
    assert all(line.startswith("# TYPE ") for line in comment_lines)
    assert page.endswith("\n")


def test_counter_and_histogram_label_names_match_tf_serving(metrics):
    record_one_of_everything(metrics)
    parsed = families(metrics)
    for name, labels in COUNTERS.items():
        assert [list(s.labels) for s in parsed[name].samples] == [labels], name
    for name, (labels, _) in HISTOGRAMS.items():
        assert list(samples(parsed[name], "_bucket")[0].labels) == labels + ["le"], name
        assert list(samples(parsed[name], "_sum")[0].labels) == labels, name


def test_histogram_buckets_are_tf_exponential_limits_then_inf(metrics):
    record_one_of_everything(metrics)
    parsed = families(metrics)
    for name, (_, spec) in HISTOGRAMS.items():
        le = [s.labels["le"] for s in samples(parsed[name], "_bucket")]
        assert le[-1] == "+Inf"
        assert len(le) == spec[2] + 1, name
        limits = [float(x) for x in le[:-1]]
        assert limits == pytest.approx(list(exponential_buckets(*spec)), rel=1e-5), name
        assert limits == sorted(limits) and len(set(limits)) == len(limits), name


def test_bucket_limits_are_printed_like_absl_strcat_double(metrics):
    metrics.record_request("m", "Predict", "GRPC", Code.OK, 1.0)
    page = metrics.render().decode()
    for le in ('"10"', '"18"', '"32.4"', '"58.32"', '"104.976"', '"188.957"', '"1102"'):
        assert f":tensorflow:serving:request_latency_bucket{{model_name=\"m\",API=\"Predict\",entrypoint=\"GRPC\",le={le}}}" in page
    assert 'le="1.47476e+09"} 1\n' in page  # 10 * 1.8**32, the last finite limit


def test_request_latency_is_recorded_only_for_ok_but_every_status_is_counted(metrics):
    metrics.record_request("digits", "Predict", "GRPC", Code.OK, 100)
    metrics.record_request("digits", "predict", "REST", Code.OK, 300)
    metrics.record_request("digits", "Predict", "GRPC", Code.NOT_FOUND, 50)
    metrics.record_request("digits", "Predict", "GRPC", Code.INVALID_ARGUMENT, 50)
    metrics.record_request("digits", "Predict", "GRPC", Code.INVALID_ARGUMENT, 50)
    parsed = families(metrics)
    counts = {s.labels["status"]: s.value for s in parsed[":tensorflow:serving:request_count"].samples}
    assert counts == {"OK": 2, "NOT_FOUND": 1, "INVALID_ARGUMENT": 2}
    latency = {(s.labels["API"], s.labels["entrypoint"]): s.value
               for s in samples(parsed[":tensorflow:serving:request_latency"], "_count")}
    assert latency == {("Predict", "GRPC"): 1, ("predict", "REST"): 1}


def test_sample_equal_to_a_limit_falls_in_the_next_bucket_as_in_tf(metrics):
    metrics.record_batch(4, 0)
    metrics.record_batch(5, 0)
    parsed = families(metrics)
    buckets = {s.labels["le"]: s.value
               for s in samples(parsed[":tensorflow:serving:batching_session:processed_batch_size"], "_bucket")}
    assert (buckets["2"], buckets["4"], buckets["8"], buckets["+Inf"]) == (0, 0, 2, 2)


def test_padding_size_is_labelled_with_the_execution_batch_size(metrics):
    metrics.record_batch(8, 3)
    metrics.record_batch(16, 0)
    parsed = families(metrics)
    counts = {s.labels["execution_batch_size"]: s.value
              for s in samples(parsed[":tensorflow:serving:batching_session:padding_size"], "_count")}
    sums = {s.labels["execution_batch_size"]: s.value
            for s in samples(parsed[":tensorflow:serving:batching_session:padding_size"], "_sum")}
    assert counts == {"8": 1, "16": 1} and sums == {"8": 3, "16": 0}


def test_load_counts_attempts_by_status_and_accumulates_latency_microseconds(metrics):
    metrics.record_load("/m/1", True, 1500)
    metrics.record_load("/m/1", False, 500)
    metrics.record_load("/m/1", True, 1000)
    parsed = families(metrics)
    attempts = {s.labels["status"]: s.value for s in parsed[":tensorflow:cc:saved_model:load_attempt_count"].samples}
    assert attempts == {"success": 2, "fail": 1}
    assert parsed[":tensorflow:cc:saved_model:load_latency"].samples[0].value == 3000


def test_warmup_status_label_is_the_tf_status_string(metrics):
    metrics.record_warmup("/m/1", True, 10, 4)
    metrics.record_warmup("/m/2", False, 10, 1, error=InvalidArgument("bad record"))
    parsed = families(metrics)
    records = {(s.labels["model_path"], s.labels["status"]): s.value
               for s in parsed[":tensorflow:serving:model_warmup_records_read"].samples}
    assert records == {("/m/1", "OK"): 4, ("/m/2", "INVALID_ARGUMENT: bad record"): 1}


def test_label_values_are_escaped_so_the_page_still_parses(metrics):
    metrics.record_request('we"ird\\model\nname', "Predict", "GRPC", Code.OK, 1)
    parsed = families(metrics)
    names = {s.labels["model_name"] for s in parsed[":tensorflow:serving:request_count"].samples}
    assert names == {'we"ird\\model\nname'}


def test_sum_keeps_full_precision(metrics):
    for _ in range(3):
        metrics.record_runtime("m", "Predict", 1234567.25)
    parsed = families(metrics)
    assert samples(parsed[":tensorflow:serving:runtime_latency"], "_sum")[0].value == 3703701.75


def test_histogram_quantile_can_be_computed_from_the_rendered_buckets(metrics):
    for latency_us in [100] * 90 + [50_000] * 10:
        metrics.record_request("m", "Predict", "GRPC", Code.OK, latency_us)
    parsed = families(metrics)
    buckets = [(float(s.labels["le"]), s.value)
               for s in samples(parsed[":tensorflow:serving:request_latency"], "_bucket")]
    assert [c for _, c in buckets] == sorted(c for _, c in buckets)  # cumulative
    assert buckets[-1] == (math.inf, 100)
    # PromQL histogram_quantile(0.5): the first bucket whose cumulative count reaches 50.
    p50_upper = next(le for le, c in buckets if c >= 50)
    p99_upper = next(le for le, c in buckets if c >= 99)
    assert 100 < p50_upper < 200 and 50_000 < p99_upper < 100_000


def test_series_without_labels_are_written_with_empty_braces(metrics):
    metrics.record_input_batch_size(2)
    page = metrics.render().decode()
    assert ':tensorflow:serving:batching_session:input_batch_size_bucket{le="1"} 0\n' in page
    assert ":tensorflow:serving:batching_session:input_batch_size_sum{} 2\n" in page
    assert ":tensorflow:serving:batching_session:input_batch_size_count{} 1\n" in page


def test_families_without_samples_still_declare_their_type(metrics):
    parsed = families(metrics)
    assert set(parsed) == set(HISTOGRAMS) | set(COUNTERS)
    assert all(not f.samples for f in parsed.values())


def test_registry_is_injected_and_cannot_hold_two_server_metrics():
    registry = CollectorRegistry()
    ServerMetrics(registry)
    with pytest.raises(ValueError, match="Duplicated"):
        ServerMetrics(registry)


def test_other_collectors_in_the_injected_registry_are_rendered_too():
    registry = CollectorRegistry()
    metrics = ServerMetrics(registry)
    Counter("tfs_stack_extra", "an app metric", registry=registry).inc(2)
    page = metrics.render().decode()
    assert "# TYPE tfs_stack_extra counter\ntfs_stack_extra_total{} 2\n" in page


def test_fresh_registries_are_independent():
    first, second = ServerMetrics(), ServerMetrics()
    first.record_wrapped_run()
    assert "wrapped_run_count{} 1" in first.render().decode()
    assert "wrapped_run_count{}" not in second.render().decode()


def test_concurrent_recording_loses_no_samples(metrics):
    def hammer():
        for _ in range(2000):
            metrics.record_request("m", "Predict", "GRPC", Code.OK, 10)
            metrics.record_wrapped_run()

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    parsed = families(metrics)
    assert parsed[":tensorflow:serving:request_count"].samples[0].value == 16000
    assert samples(parsed[":tensorflow:serving:request_latency"], "_count")[0].value == 16000
    assert parsed[":tensorflow:serving:batching_session:wrapped_run_count"].samples[0].value == 16000


def test_content_type_is_the_prometheus_text_format():
    assert ServerMetrics.CONTENT_TYPE.startswith("text/plain")
    assert "version=0.0.4" in metrics_module.CONTENT_TYPE
