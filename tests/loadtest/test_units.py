"""Fast checks of the load-test library's pure parts (no server, no locust in this process)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from loadtest import driver, metrics, procfs, options, payloads, plots, runner, servers, slo, space, sweep, tune
from loadtest.metrics import parse_histogram_totals, split_between
from loadtest.runner import parse_duration
from loadtest.slo import Gates, evaluate, load_gates
from loadtest.tune import coordinate_descent, score_levels
from serving.checkout import REPO_ROOT

# A page in TF Serving's exposition format (names as prometheus_exporter.cc writes them).
PAGE_BEFORE = """\
# TYPE :tensorflow:serving:request_count counter
:tensorflow:serving:request_count{model_name="digits",status="OK"} 10
# TYPE :tensorflow:serving:request_latency histogram
:tensorflow:serving:request_latency_bucket{model_name="digits",API="predict",entrypoint="GRPC",le="10"} 0
:tensorflow:serving:request_latency_sum{model_name="digits",API="predict",entrypoint="GRPC"} 10000
:tensorflow:serving:request_latency_count{model_name="digits",API="predict",entrypoint="GRPC"} 10
:tensorflow:serving:request_latency_sum{model_name="text",API="predict",entrypoint="GRPC"} 99999
:tensorflow:serving:request_latency_count{model_name="text",API="predict",entrypoint="GRPC"} 7
:tensorflow:serving:runtime_latency_sum{model_name="digits",API="Predict",runtime="TF1"} 5000
:tensorflow:serving:runtime_latency_count{model_name="digits",API="Predict",runtime="TF1"} 10
:tensorflow:serving:batching_session:queuing_latency_sum{thread_pool_name="model_server_batch_threads"} 2000
:tensorflow:serving:batching_session:queuing_latency_count{thread_pool_name="model_server_batch_threads"} 10
:tensorflow:serving:batching_session:processed_batch_size_sum 10
:tensorflow:serving:batching_session:processed_batch_size_count 10
"""
PAGE_AFTER = (PAGE_BEFORE
              .replace('entrypoint="GRPC"} 10000', 'entrypoint="GRPC"} 40000')
              .replace('API="predict",entrypoint="GRPC"} 10\n', 'API="predict",entrypoint="GRPC"} 20\n')
              + ':tensorflow:serving:request_latency_sum{model_name="digits",API="predict",entrypoint="REST"} 20000\n'
              + ':tensorflow:serving:request_latency_count{model_name="digits",API="predict",entrypoint="REST"} 10\n'
              ).replace('runtime="TF1"} 5000', 'runtime="TF1"} 15000').replace('runtime="TF1"} 10', 'runtime="TF1"} 30') \
               .replace('batch_threads"} 2000', 'batch_threads"} 8000').replace('batch_threads"} 10', 'batch_threads"} 30') \
               .replace("processed_batch_size_sum 10", "processed_batch_size_sum 30") \
               .replace("processed_batch_size_count 10", "processed_batch_size_count 15")


def test_server_split_is_the_delta_of_sum_over_count_for_the_model_only():
    split = split_between(parse_histogram_totals(PAGE_BEFORE, "digits"), parse_histogram_totals(PAGE_AFTER, "digits"))
    # request latency: (40000 + 20000 - 10000) us over (20 + 10 - 10) requests = 2.5 ms; text's series is ignored
    assert split.request_ms == pytest.approx(2.5)
    assert split.requests == 20
    assert split.runtime_ms == pytest.approx(0.5)           # 10000 us / 20
    assert split.queue_ms == pytest.approx(0.3)             # 6000 us / 20
    assert split.batch_size_mean == pytest.approx(4.0)      # 20 rows / 5 batches


def test_server_split_is_empty_when_a_scrape_is_missing_or_nothing_was_recorded():
    assert split_between(None, parse_histogram_totals(PAGE_AFTER)).request_ms is None
    same = parse_histogram_totals(PAGE_BEFORE, "digits")
    assert split_between(same, same).queue_ms is None


@pytest.mark.parametrize("text, seconds", [("90", 90), ("30s", 30), ("2m", 120), ("1h30m", 5400), ("1m30s", 90)])
def test_durations_parse_like_locust(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "ten", "5x", "3m-"])
def test_bad_durations_are_rejected(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_each_gate_reports_measured_value_and_limit():
    summary = {"p99_ms": 12.0, "failure_ratio": 0.01, "rps": 50.0}
    results = {r.gate: r for r in evaluate(Gates(p99_ms=10, max_failure_ratio=0.05, min_rps=100), summary)}
    assert not results["p99_ms"].passed and results["p99_ms"].measured == 12.0
    assert results["max_failure_ratio"].passed
    assert not results["min_rps"].passed
    assert "min_rps" in str(results["min_rps"]) and "50" in str(results["min_rps"])
    assert "BROKEN" in str(results["p99_ms"])


def test_unset_gates_are_not_checked():
    assert evaluate(Gates(), {"p99_ms": 1e9, "failure_ratio": 1.0, "rps": 0.0}) == []


def test_gates_file_values_are_overridden_by_flags(tmp_path):
    path = tmp_path / "slo.json"
    path.write_text(json.dumps({"p99_ms": 50, "min_rps": 10}))
    gates = load_gates(path).merged(Gates(p99_ms=20))
    assert gates == Gates(p99_ms=20, max_failure_ratio=None, min_rps=10)


def test_gates_file_with_unknown_gate_is_rejected(tmp_path):
    path = tmp_path / "slo.json"
    path.write_text(json.dumps({"p95_ms": 50}))
    with pytest.raises(ValueError, match="p95_ms"):
        load_gates(path)


def test_target_refuses_version_and_label_together():
    with pytest.raises(ValueError, match="not both"):
        payloads.Target(version=2, version_label="stable")


def test_published_names_follow_the_exporter():
    assert payloads.published_name("digits", "xla") == "digits_xla"
    assert payloads.published_name("resnet50", "trt-fp16") == "resnet50_trt_fp16"
    with pytest.raises(ValueError):
        payloads.published_name("digits", "int8")


def test_locust_command_selects_user_class_and_forwards_target(tmp_path):
    spec = runner.RunSpec(scenario="ramp", host="http://127.0.0.1:8500", protocol="rest", run_time=12, users=4,
                          target=payloads.Target(model="text", version_label="canary"), out_dir=tmp_path)
    cmd = runner.locust_command(spec)
    assert cmd[-1] == "RestUser"
    assert cmd[cmd.index("--host") + 1] == "http://127.0.0.1:8500"
    assert cmd[cmd.index("--label") + 1] == "canary"
    assert cmd[cmd.index("--model") + 1] == "text"
    assert cmd[cmd.index("-f") + 1].endswith("loadtest/locustfiles/ramp.py")


def _level(level, rps, p99, errors=0, requests=100):
    return sweep.LevelResult(level=level, mode="concurrency", throughput_rps=rps, p50_ms=p99 / 2, p90_ms=p99,
                             p95_ms=p99, p99_ms=p99, avg_ms=p99 / 2, requests=requests, errors=errors,
                             error_kinds={}, stable=True, windows=3, measured_s=3.0, client_cpu_pct=10.0)


def test_score_is_best_throughput_within_budget_and_without_errors():
    levels = [_level(1, 100, 5), _level(2, 180, 9), _level(4, 300, 12), _level(8, 400, 8, errors=3)]
    score, best = score_levels(levels, budget_ms=10)
    assert score == 180 and best.level == 2


def test_score_is_zero_when_no_level_meets_the_budget():
    assert score_levels([_level(1, 100, 50)], budget_ms=10) == (0.0, None)


def test_coordinate_descent_climbs_to_the_optimum_within_the_trial_bound():
    grid = {"num_batch_threads": (1, 2, 4), "max_batch_size": (1, 2, 4, 8, 16, 32),
            "batch_timeout_micros": (0, 1000, 5000), "max_enqueued_batches": (1, 4, 16)}
    optimum = {"num_batch_threads": 2, "max_batch_size": 16, "batch_timeout_micros": 1000, "max_enqueued_batches": 4}
    calls = []

    def measure(p):
        calls.append(p)
        return 1000.0 - sum(abs(grid[k].index(p[k]) - grid[k].index(optimum[k])) * 100 for k in p)

    start = {"num_batch_threads": 1, "max_batch_size": 2, "batch_timeout_micros": 0, "max_enqueued_batches": 16}
    best, scores = coordinate_descent(start, grid, measure, max_trials=30, min_gain=0.01)
    assert best == optimum
    assert len(calls) == len(scores) <= 30


def test_coordinate_descent_never_exceeds_max_trials():
    grid = {k: tuple(range(10)) for k in tune.KNOBS}
    calls = []
    best, scores = coordinate_descent({k: 0 for k in tune.KNOBS}, grid,
                                      lambda p: calls.append(p) or float(sum(p.values())), max_trials=5)
    assert len(calls) == 5 and len(scores) == 5


def test_coordinate_descent_takes_a_known_start_score_without_measuring_it():
    grid = {k: (0, 1, 2) for k in tune.KNOBS}
    start = {k: 0 for k in tune.KNOBS}
    calls = []

    def measure(p):  # relative scores, as the paired tuner gives them: the baseline is 1.0
        calls.append(p)
        return 1.2 if p["num_batch_threads"] == 1 else 0.9

    best, scores = coordinate_descent(start, grid, measure, max_trials=3, min_gain=0.05, start_score=1.0)
    assert start not in calls and len(calls) == 3
    assert best == {**start, "num_batch_threads": 1}
    assert scores[tuple((k, 0) for k in tune.KNOBS)] == 1.0


def test_a_candidates_batching_proto_keeps_allowed_batch_sizes_valid():
    from google.protobuf import text_format

    from serving.config.protos import batching_parameters_class

    base = text_format.Parse("max_batch_size { value: 64 } allowed_batch_sizes: [1, 8, 32, 64] "
                             "pad_variable_length_inputs: true", batching_parameters_class()())
    proto = space.batching_proto({"batching": "on", "num_batch_threads": 2, "max_batch_size": 16,
                                  "batch_timeout_micros": 500, "max_enqueued_batches": 4}, base)
    assert list(proto.allowed_batch_sizes) == [1, 8, 16]
    assert proto.max_batch_size.value == 16 and proto.pad_variable_length_inputs


def test_written_config_parses_back_with_the_real_loader(tmp_path):
    from serving.config import load_batching_parameters

    params = {"num_batch_threads": 2, "max_batch_size": 8, "batch_timeout_micros": 250, "max_enqueued_batches": 64}
    path = tune.write_config(tmp_path / "batching.config", space.batching_proto({"batching": "on", **params}),
                             ["measured: 1 -> 2", "ok"])
    assert path.read_text().startswith("# measured: 1 -> 2\n# ok\n")
    assert tune.params_of(load_batching_parameters(path)) == params


@pytest.mark.parametrize("module", [driver, procfs, metrics, options, payloads, plots, runner, servers, slo, sweep, tune])
def test_library_modules_declare_all(module):
    assert module.__all__ and all(hasattr(module, name) for name in module.__all__)


def _python(code: str) -> str:
    """What ``python -c code`` prints, run in the checkout; it must exit 0."""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_importing_the_library_does_not_import_locust_or_gevent():
    code = ("import sys, loadtest, loadtest.__main__, loadtest.runner, loadtest.sweep, loadtest.tune, "
            "loadtest.payloads, loadtest.driver, loadtest.servers, loadtest.plots, loadtest.metrics, "
            "loadtest.options\n"
            "print(sorted(m for m in ('locust', 'gevent', 'tensorflow') if m in sys.modules))")
    assert _python(code) == "[]"


def test_a_rest_failure_without_a_message_is_named_by_its_status():
    # An answer with an empty body (a proxy's 503) has no message and, not being a transport failure, no
    # locust ``error`` attribute: naming it used to raise AttributeError inside the user's task.
    # (a subprocess: loadtest.users imports locust, which monkey-patches the process with gevent)
    code = ("import os\n"
            "from loadtest.users import _rest_error\n"
            "class Answer:\n"
            "    status_code, content, text = 503, b'', ''\n"
            "print(_rest_error(Answer()), flush=True)\n"
            "os._exit(0)\n")
    assert _python(code) == "HTTP 503"


def test_locustfiles_are_not_a_package():
    assert not (REPO_ROOT / "loadtest" / "locustfiles" / "__init__.py").exists()
    assert sorted(p.stem for p in (REPO_ROOT / "loadtest" / "locustfiles").glob("*.py")) == sorted(runner.SCENARIOS)


# ---------------------------------------------------------------- any model, any server: flags and payloads

@pytest.mark.parametrize("argv, names", [
    (["run", "steady", "--grpc", "http://127.0.0.1:8501"], ["argument --grpc: http://127.0.0.1:8501", "--rest"]),
    (["run", "steady", "--grpc", "https://tfs.example:443"], ["argument --grpc: https://tfs.example:443", "--rest"]),
    (["run", "steady", "--rest", "grpc://127.0.0.1:8500"], ["argument --rest: grpc://127.0.0.1:8500", "--grpc"]),
    (["sweep", "--grpc", "http://127.0.0.1:8501"], ["argument --grpc: http://127.0.0.1:8501", "--rest"]),
])
def test_a_scheme_of_the_other_api_is_refused_by_argparse_naming_both(argv, names, capsys):
    from loadtest.__main__ import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"python -m loadtest {argv[0]}: error: argument" in err
    for name in names:
        assert name in err


@pytest.mark.parametrize("argv, names", [
    (["sweep", "--protocol", "grpc", "--rest", "http://127.0.0.1:8501"],
     ["--protocol grpc", "--rest http://127.0.0.1:8501"]),
    (["sweep", "--protocol", "grpc,rest", "--grpc", "127.0.0.1:8500"], ["--protocol rest", "--grpc 127.0.0.1:8500"]),
    (["sweep", "--protocol", "http", "--grpc", "127.0.0.1:8500"], ["--protocol", "grpc, rest or grpc,rest"]),
])
def test_a_protocol_that_contradicts_the_addresses_is_refused_naming_both(argv, names, capsys):
    from loadtest.__main__ import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m loadtest {argv[0]}: error: ")
    for name in names:
        assert name in err


@pytest.mark.parametrize("protocol, address, expected", [
    ("grpc", "127.0.0.1:8500", "127.0.0.1:8500"),
    ("grpc", "grpc://127.0.0.1:8500", "127.0.0.1:8500"),
    ("rest", "http://127.0.0.1:8501/", "http://127.0.0.1:8501"),
    ("rest", "https://tfs.example", "https://tfs.example"),
])
def test_the_scheme_decides_the_protocol_and_the_address_is_normalized(protocol, address, expected):
    assert options.server_address(protocol, address) == expected


def test_an_address_outside_argparse_is_a_usage_error_naming_its_flag():
    with pytest.raises(options.UsageError, match=r"^--host: 127.0.0.1:8501 has no scheme; --rest takes"):
        options.rest_address("127.0.0.1:8501", flag="--host")


def test_sweep_protocols_default_to_the_addresses_given():
    assert options.protocols_for(None, "h:1", None) == ["grpc"]
    assert options.protocols_for(None, None, "http://h:2") == ["rest"]
    assert options.protocols_for(None, "h:1", "http://h:2") == ["grpc", "rest"]
    assert options.protocols_for("rest", "h:1", "http://h:2") == ["rest"]


def test_locust_gets_the_prebuilt_payload_and_the_host_of_its_protocol(tmp_path):
    spec = runner.RunSpec(scenario="steady", host="grpc://127.0.0.1:8500", protocol="grpc",
                          target=payloads.Target(model="user_mlp", batch_size=4), out_dir=tmp_path)
    cmd = runner.locust_command(spec, tmp_path / "payload.json")
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1:8500"
    assert cmd[cmd.index("--payload-file") + 1] == str(tmp_path / "payload.json")
    assert cmd[cmd.index("--batch-size") + 1] == "4" and cmd[-1] == "GrpcUser"
    with pytest.raises(options.UsageError, match="is a REST URL \\(http://\\), not a gRPC address"):
        runner.RunSpec(scenario="steady", host="http://127.0.0.1:8501", protocol="grpc")


def _npz(path, **arrays):
    np.savez(path, **arrays)
    return path


def test_input_data_npz_needs_no_manifest_and_no_server(tmp_path):
    data = _npz(tmp_path / "x.npz", x=np.arange(6, dtype=np.float32).reshape(3, 2), k=np.array([7, 8, 9]))
    target = payloads.Target(model="anything", model_repo=tmp_path / "none", input_data=data)
    payload = payloads.build_payload(target)
    assert payload.source == f"input file {data}"
    np.testing.assert_array_equal(payload.inputs["x"], np.arange(6, dtype=np.float32).reshape(3, 2))
    # --batch-size cycles the file's rows
    cycled = payloads.build_payload(target.replace(batch_size=5)).inputs
    np.testing.assert_array_equal(cycled["k"], [7, 8, 9, 7, 8])


def test_input_data_with_inputs_of_different_batch_sizes_is_refused(tmp_path):
    data = _npz(tmp_path / "x.npz", x=np.zeros((3, 2), np.float32), k=np.zeros(2))
    with pytest.raises(payloads.PayloadError, match="same batch dimension"):
        payloads.build_payload(payloads.Target(model="anything", input_data=data))


def test_a_model_without_manifest_and_without_a_server_is_refused_saying_what_to_give(tmp_path):
    with pytest.raises(payloads.PayloadError, match="no manifest under .* give --grpc or --rest, or --input-data"):
        payloads.build_payload(payloads.Target(model="anything", model_repo=tmp_path))


def test_a_written_payload_reads_back_with_the_same_request_and_rest_body(tmp_path):
    data = _npz(tmp_path / "s.npz", text=np.array([b"a", b"bc"]), n=np.array([1.5, 2.0], np.float32))
    payload = payloads.build_payload(payloads.Target(model="m", version_label="canary", input_data=data))
    back = payloads.read_payload(payloads.write_payload(payload, tmp_path / "payload.json"))
    assert back.grpc_request == payload.grpc_request
    assert back.rest_path == "/v1/models/m/labels/canary:predict"
    assert (back.source, back.label) == (payload.source, "m:serving_default")
    assert json.loads(back.rest_body) == json.loads(payload.rest_body)
