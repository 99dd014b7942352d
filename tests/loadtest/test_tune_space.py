"""The tuner's search space, search and report, without servers (fast)."""
from __future__ import annotations

import json

import pytest

from loadtest import space, tune, tune_report
from loadtest.tune import coordinate_descent

CPU = space.Backend("embedded")
GPU = space.Backend("docker", gpu=True)
START = space.default_config("fp32", {"max_batch_size": 64, "batch_timeout_micros": 0, "num_batch_threads": 2,
                                      "max_enqueued_batches": 16})


def test_the_default_is_tf_servings_own():
    assert START["intra_op"] == START["inter_op"] == 0 and START["variant"] == "fp32"
    assert START["batching"] == "off" and START["gpu_memory_fraction"] == 0.0
    assert space.batching_proto(START) is None


def test_flags_are_tensorflow_model_servers_own_and_xla_gets_its_flag():
    config = {**START, "intra_op": 4, "inter_op": 1, "variant": "xla", "gpu_memory_fraction": 0.5}
    assert space.server_flags(config, CPU) == ["--tensorflow_intra_op_parallelism=4",
                                               "--tensorflow_inter_op_parallelism=1",
                                               "--xla_cpu_compilation_enabled=true"]
    assert space.server_flags(config, GPU)[2:] == ["--xla_cpu_compilation_enabled=true",
                                                   "--per_process_gpu_memory_fraction=0.5"]
    # the parser the embedded server uses reads them back as the same settings
    from serving.server.flags import parse_flags

    parsed = parse_flags(space.server_flags(config, CPU)).flags
    assert (parsed.tensorflow_intra_op_parallelism, parsed.tensorflow_inter_op_parallelism) == (4, 1)
    assert parsed.xla_cpu_compilation_enabled


def test_batching_parameters_sit_unused_while_batching_is_off():
    off = {**START, "batch_timeout_micros": 5000}
    assert space.normalize(off, START) == START
    on = {**START, "batching": "on", "batch_timeout_micros": 5000}
    proto = space.batching_proto(on)
    assert proto.batch_timeout_micros.value == 5000 and proto.max_batch_size.value == 64


def test_gpu_memory_and_trt_are_skipped_on_a_cpu_backend_with_the_reason(tmp_path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m_trt_fp16" / "1").mkdir(parents=True)
    skipped = space.skipped_dimensions(CPU, "m", tmp_path)
    assert "no GPU" in skipped["gpu_memory_fraction"]
    assert "GPU image" in skipped["variant:trt-fp16"]
    assert "export it with" in skipped["variant:xla"] and "--variant xla" in skipped["variant:xla"]
    gpu = space.skipped_dimensions(GPU, "m", tmp_path)
    assert "gpu_memory_fraction" not in gpu and "variant:trt-fp16" not in gpu


def test_exhaustive_dimensions_measure_every_value_and_take_the_best():
    grid = {"intra_op": (0, 1, 2, 4), "variant": ("fp32", "xla")}
    scores = {1: 0.6, 2: 1.0, 4: 1.3}
    calls = []

    def measure(point):
        calls.append(dict(point))
        return scores.get(point["intra_op"], 1.0) * (1.2 if point["variant"] == "xla" else 1.0)

    best, _ = coordinate_descent({"intra_op": 0, "variant": "fp32"}, grid, measure, max_trials=10, min_gain=0.05,
                                 start_score=1.0, exhaustive=("intra_op", "variant"))
    assert best == {"intra_op": 4, "variant": "xla"}
    # every thread count was measured even though 1 was worse than the default (no early stop)
    assert [c["intra_op"] for c in calls[:3]] == [1, 2, 4]


def test_points_that_normalize_together_are_measured_once():
    grid = {"batching": ("off", "on"), "batch_timeout_micros": (0, 1000, 5000)}
    calls = []

    def normalize(point):
        return {**point, "batch_timeout_micros": 0} if point["batching"] == "off" else point

    best, _ = coordinate_descent({"batching": "off", "batch_timeout_micros": 0}, grid,
                                 lambda p: calls.append(p) or 0.9, max_trials=10, start_score=1.0,
                                 exhaustive=("batching",), normalize=normalize)
    assert calls == [{"batching": "on", "batch_timeout_micros": 0}]  # timeouts with batching off: same point
    assert best == {"batching": "off", "batch_timeout_micros": 0}


def _trial(index, config, dimension, ratio, label="search", p50=(2.0, 1.5), rounds=((100.0, 120.0), (110.0, 125.0))):
    rounds = [{"baseline_rps": b, "candidate_rps": c, "baseline_p50_c1_ms": p50[0], "candidate_p50_c1_ms": p50[1],
               "baseline_levels": [{"level": 1, "throughput_rps": b / 2, "p50_ms": p50[0], "p99_ms": 9.0}],
               "candidate_levels": [{"level": 1, "throughput_rps": c / 2, "p50_ms": p50[1], "p99_ms": 8.0}]}
              for b, c in rounds]
    ratios = tune.round_ratios(rounds, "candidate_rps", "baseline_rps")
    return {"index": index, "config": config, "dimension": dimension, "label": label, "ratio": ratio,
            "throughput_ratio": ratio, "throughput_spread": tune.spread(ratios), "latency_ratio": 1.3,
            "score_rps": 100 * ratio, "baseline_rps": 100.0, "p50_c1_ms": p50[1], "baseline_p50_c1_ms": p50[0],
            "baseline_cpu_ms_per_request": 3.0, "cpu_ms_per_request": 2.5, "rounds": rounds, "error": None,
            "note": None}


def _summary(best, trials, final):
    return {"model": "digits", "backend": "embedded", "gpu": False, "protocol": "grpc", "objective": "throughput",
            "p99_budget_ms": 20.0, "min_gain": 0.05, "levels": [1, 8], "rounds": 2, "final_rounds": 3, "cpus": 2,
            "load_average": [3.0, 2.0, 1.0], "seconds": 100.0, "default": START, "search_best": best,
            "grid": {**{k: [START[k]] for k in space.DIMENSIONS}, "intra_op": [0, 1, 4], "inter_op": [0, 1],
                     "variant": ["fp32", "xla"], "batching": ["off", "on"], "batch_timeout_micros": [0, 1000]},
            "skipped": {"gpu_memory_fraction": "no GPU: test", "variant:trt-fp16": "no digits_trt_fp16"},
            "trials": trials, "final": final, "command": "python -m loadtest tune --model digits"}


def test_report_has_a_measured_row_per_setting_even_without_gain_then_combined_and_flags(tmp_path):
    xla = {**START, "variant": "xla"}
    best = {**xla, "batching": "on", "batch_timeout_micros": 1000}
    trials = [_trial(0, {**START, "intra_op": 1}, "intra_op", 0.6),
              _trial(1, {**START, "intra_op": 4}, "intra_op", 1.02),
              _trial(2, {**START, "inter_op": 1}, "inter_op", 0.97), _trial(3, xla, "variant", 1.2),
              _trial(4, {**xla, "batching": "on"}, "batching", 1.5),
              _trial(5, best, "batch_timeout_micros", 1.7)]
    summary = _summary(best, trials, _trial(6, best, "", 1.6, label="final"))
    rows = {r["dimension"]: r for r in tune_report.table_rows(summary)}
    assert rows["intra_op"]["verdict"] == "no gain: default kept" and rows["intra_op"]["tuned"] == "4"
    assert [t["value"] for t in rows["intra_op"]["tried"]] == ["1", "4"]
    assert rows["variant"]["verdict"] == "adopted" and rows["variant"]["p50_before_ms"] == 2.0
    assert rows["batching"]["on_top_of"] == ["variant=xla"]
    assert rows["gpu_memory_fraction"]["verdict"].startswith("skipped: no GPU")
    assert rows["variant"]["gain_pct"] == pytest.approx(20.0)
    assert rows["variant"]["spread_pct"] == pytest.approx(100 * (1.2 - 1.13636) / 2, abs=0.01)
    paths = tune_report.write_report(summary, tmp_path)
    text = paths["markdown"].read_text()
    assert "| intra-op threads (--tensorflow_intra_op_parallelism) | auto (2) | 4 | 2.00 → 1.50 |" in text
    assert "## Combined best against the default" in text and "use it" in text
    assert "      - --xla_cpu_compilation_enabled=true" in text and "      - --enable_batching=true" in text
    assert "batch_timeout_micros {\n  value: 1000\n}" in (tmp_path / "batching.config").read_text()
    doc = json.loads(paths["json"].read_text())
    assert doc["kind"] == "tune" and doc["recommended"]["model"] == "digits_xla"
    assert [s["label"] for s in doc["series"]] == ["digits/grpc/default", "digits/grpc/tuned"]
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_winner_that_fails_the_final_rounds_is_not_recommended(tmp_path):
    best = {**START, "intra_op": 4}
    summary = _summary(best, [_trial(0, best, "intra_op", 1.3)], _trial(1, best, "", 1.01, label="final"))
    assert tune_report.chosen_config(summary) == START
    text = tune_report.render_markdown(summary)
    assert "did not hold up in fresh rounds" in text and "--tensorflow_intra_op_parallelism=0" in text
    assert "Batching stays off" in text
    tune_report.write_report(summary, tmp_path)
    assert not (tmp_path / "batching.config").exists()


def test_a_final_gain_that_the_rounds_disagree_on_is_noise():
    best = {**START, "intra_op": 4}
    noisy = _trial(1, best, "", 1.1, label="final", rounds=((100.0, 140.0), (100.0, 80.0)))  # x1.4 then x0.8
    summary = _summary(best, [_trial(0, best, "intra_op", 1.3)], noisy)
    assert not tune_report.combined(summary)["holds"] and tune_report.chosen_config(summary) == START
    assert "x1.10 ± 0.30" in tune_report.render_markdown(summary)


def test_a_round_where_one_side_had_nothing_within_the_budget_is_left_out_of_the_ratio():
    trial = tune.Trial(0, dict(START))
    trial.rounds = [{"baseline_rps": 100.0, "candidate_rps": 120.0, "baseline_p50_c1_ms": 2.0,
                     "candidate_p50_c1_ms": 1.0, "baseline_cpu_ms": None, "candidate_cpu_ms": None},
                    {"baseline_rps": 0.0, "candidate_rps": 900.0, "baseline_p50_c1_ms": 2.0,
                     "candidate_p50_c1_ms": 1.0, "baseline_cpu_ms": None, "candidate_cpu_ms": None}]
    tune._summarise_trial(trial, "throughput")
    assert trial.throughput_ratio == pytest.approx(1.2) and trial.score == pytest.approx(1.2)
    assert trial.note.startswith("1 of 2 rounds left out")
