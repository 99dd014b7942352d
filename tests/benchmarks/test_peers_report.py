"""The peers benchmark's report: ratios, targets and exit status rendered from recorded measurements.

RECORDED INPUT, NOT A MEASUREMENT: ``_recorded()`` is a hand-written dict shaped as
``python -m benchmarks.peers --json`` writes it, with round figures chosen so each ratio and
target is known in advance. Nothing here starts a server or times anything.
"""
from __future__ import annotations

import copy
import json
import os

import pytest

from loadtest.compare import compare_results, load_result

from benchmarks import peers
from benchmarks.peers import TODAY_RESNET50_REST_C1, Measurements, answers_agree
from loadtest.procfs import tree_rss_anon_mb, tree_rss_mb


def render(recorded: dict) -> str:
    return peers.render(Measurements.from_json(recorded))


def evaluate(recorded: dict):
    return peers.evaluate(Measurements.from_json(recorded))


def exit_code(recorded: dict) -> int:
    return peers.exit_code(Measurements.from_json(recorded))


def comparable_series(recorded: dict) -> list:
    return peers.comparable_series(Measurements.from_json(recorded))


def _point(rps: float, p50_ms: float = 2.0, cpu_ms: float = 1.0) -> dict:
    return {"rps": rps, "p50_ms": p50_ms, "p99_ms": p50_ms * 3, "cpu_ms": cpu_ms, "requests": int(rps * 3),
            "errors": 0}


def _recorded() -> dict:
    """Two rounds; every target met (recorded input, see the module docstring)."""
    digits_embedded = {
        "rest c=1": [_point(400, 2.5, 1.2), _point(360, 2.5, 1.2)],
        "rest c=32": [_point(800, 39, 1.2), _point(760, 41, 1.2)],
        "grpc c=1": [_point(500, 2.0, 1.0), _point(480, 2.0, 1.0)],
        "grpc c=32": [_point(900, 35, 1.0), _point(880, 36, 1.0)],
        "sdk-grpc c=32": [_point(700), _point(700)],
        "sdk-rest c=32": [_point(600), _point(600)],
    }
    digits_batching = {
        "rest c=1": [_point(390, 2.8), _point(350, 2.7)],
        "rest c=32": [_point(850, 38), _point(800, 40)],
        "grpc c=1": [_point(490, 2.2), _point(470, 2.2)],
        "grpc c=32": [_point(950, 33), _point(900, 34)],
    }
    resnet = {"rest c=1": [_point(7.0, 140), _point(7.0, 140)], "rest c=8": [_point(9.0)] * 2,
              "grpc c=1": [_point(8.0, 120), _point(8.0, 120)], "grpc c=8": [_point(10.0)] * 2}
    resnet_batching = {"grpc c=1": [_point(8.0)] * 2, "grpc c=8": [_point(12.0)] * 2,
                       "rest c=1": [_point(7.0)] * 2, "rest c=8": [_point(9.5)] * 2}
    return {
        "machine": {"cpu": "recorded", "cores": 2, "python": "3.11", "load_before": 0.1, "load_after": 0.2},
        "settings": {"command": "python -m benchmarks.peers", "rounds": 2, "batch_timeout_micros": 1000},
        "skipped": {"tfserving/digits": "tensorflow/serving:2.17.1 needs Docker: no engine"},
        "servers": {
            "digits": {
                "embedded": {"points": digits_embedded, "cold_start_s": [6.8, 7.0], "rss_mb": [480, 480],
                             "rss_anon_mb": [190, 192]},
                "embedded+batching": {"points": digits_batching, "cold_start_s": [7.0, 7.0], "rss_mb": [490, 490]},
                "flask-1w": {"points": {"rest c=1": [_point(200), _point(180)],
                                        "rest c=32": [_point(400), _point(380)]},
                             "cold_start_s": [5.2, 5.0], "rss_mb": [468, 470]},
                "fastapi": {"points": {"rest c=1": [_point(250), _point(240)], "rest c=32": [_point(420)] * 2},
                            "cold_start_s": [5.3, 5.3], "rss_mb": [461, 461]},
            },
            "resnet50": {
                "embedded": {"points": resnet, "cold_start_s": [16.0], "rss_mb": [700, 700]},
                "embedded+batching": {"points": resnet_batching, "rss_mb": [710, 710]},
                "kserve": {"points": {"rest c=1": [_point(3.0)] * 2, "rest c=8": [_point(3.5)] * 2},
                           "rss_mb": [731, 731]},
            },
        },
        "in_process": {"digits": {"b1 t1": [3000.0, 3000.0], "b1 t2": [2000.0, 2000.0]},
                       "resnet50": {"b1 t1": [9.0, 9.0], "b8 t2": [11.7, 11.7]}},
    }


def _target(measurements: dict, start: str):
    targets, _, _ = evaluate(measurements)
    (found,) = [t for t in targets if t.name.startswith(start)]
    return found


def test_every_target_met_exits_0_and_says_so():
    report = render(_recorded())
    assert exit_code(_recorded()) == 0
    assert "FAIL" not in report
    assert report.rstrip().endswith("every measured target met")


def test_embedded_over_each_peer_is_the_median_of_the_per_round_ratios():
    report = render(_recorded())
    # round 1: 400/200 = 2.0, round 2: 360/180 = 2.0; c=32: 800/400, 760/380
    assert "embedded / peer, rest c=1 (req/s): flask-1w 2.00x, fastapi 1.55x" in report
    assert "embedded / peer, rest c=32 (req/s): flask-1w 2.00x" in report
    assert "embedded / peer, rest c=8 (req/s): kserve 2.57x" in report


def test_served_over_in_process_and_the_spread_are_printed():
    report = render(_recorded())
    assert "embedded rest c=1 / in-process b1 t1: 380.0 / 3000.0 = 0.13" in report
    assert "380.0 (2.5) ±5%" in report          # median of 400 and 360, half-range 20 of 380
    assert "SKIPPED tfserving/digits: tensorflow/serving:2.17.1 needs Docker" in report


def test_failed_requests_are_shown_under_their_point():
    failing = _recorded()
    failing["servers"]["digits"]["embedded+batching"]["points"]["grpc c=32"][1]["errors"] = 35
    lines = render(failing).splitlines()
    row = lines.index(next(line for line in lines if line.startswith("embedded+batching")))
    assert lines[row + 2].startswith("  failed requests") and lines[row + 2].split() == ["failed", "requests", "35"]
    assert not any(line.startswith("  failed requests") for line in render(_recorded()).splitlines())


def test_resnet50_rest_target_is_against_the_labelled_constant():
    target = _target(_recorded(), "resnet50 REST c=1 / today's")
    assert f"{TODAY_RESNET50_REST_C1} req/s" in target.name
    assert target.ratio == pytest.approx(7.0 / 3.3) and target.passed
    slow = _recorded()
    slow["servers"]["resnet50"]["embedded"]["points"]["rest c=1"] = [_point(6.0)] * 2
    assert not _target(slow, "resnet50 REST c=1 / today's").passed
    assert exit_code(slow) == 1
    assert "missed targets: resnet50 REST c=1 / today's 3.3 req/s" in render(slow)


def test_grpc_costing_more_server_cpu_than_rest_fails():
    costly = _recorded()
    for point in costly["servers"]["digits"]["embedded"]["points"]["grpc c=32"]:
        point["cpu_ms"] = 1.5
    target = _target(costly, "digits c=32 server CPU per request")
    assert target.ratio == pytest.approx(1.25) and not target.passed
    assert "FAIL  digits c=32 server CPU per request, gRPC / REST (no batching): 1.25x (target <= 1.0x)" \
        in render(costly)


def test_batching_latency_target_allows_the_timeout_plus_half_a_millisecond():
    target = _target(_recorded(), "digits rest c=1 p50 added by batching")
    assert target.limit == pytest.approx(1.5)
    assert target.ratio == pytest.approx(2.75 - 2.5) and target.passed
    late = _recorded()
    late["servers"]["digits"]["embedded+batching"]["points"]["rest c=1"] = [_point(390, 4.1)] * 2
    assert not _target(late, "digits rest c=1 p50 added by batching").passed


def test_batching_that_loses_at_c32_and_a_fat_embedded_server_fail_by_name():
    worse = _recorded()
    worse["servers"]["digits"]["embedded+batching"]["points"]["grpc c=32"] = [_point(700), _point(700)]
    worse["servers"]["resnet50"]["embedded"]["rss_mb"] = [800, 800]
    failed = [t.name for t in evaluate(worse)[0] if not t.passed]
    assert failed == ["digits grpc c=32 batching on / off (req/s)", "resnet50 embedded RSS - best peer's (MB)"]
    assert exit_code(worse) == 1


def test_stretch_target_is_printed_but_never_fails_the_run():
    _, stretch, _ = evaluate(_recorded())
    (target,) = stretch
    assert target.ratio == pytest.approx(890 / 2000) and target.passed
    short = _recorded()
    short["in_process"]["digits"]["b1 t2"] = [9000.0, 9000.0]
    assert "NOT MET  stretch:" in render(short)
    assert exit_code(short) == 0


def test_targets_of_a_model_not_measured_are_skipped_not_failed():
    digits_only = _recorded()
    del digits_only["servers"]["resnet50"], digits_only["in_process"]["resnet50"]
    report = render(digits_only)
    assert "SKIP  resnet50 REST c=1 / embedded gRPC c=1 (req/s): not measured in this run" in report
    assert exit_code(digits_only) == 0


def test_the_report_renders_the_same_from_its_json():
    recorded = _recorded()
    written = json.loads(json.dumps(Measurements.from_json(recorded).to_json()))
    assert render(written) == render(copy.deepcopy(recorded))


def test_answers_agree_within_tolerance_and_name_the_output_that_differs():
    reference = b'{"predictions": [[0.1, 0.9]]}'
    assert answers_agree(reference, b'{"predictions": [[0.1000001, 0.9]]}', atol=1e-5, rtol=1e-4) is None
    differs = answers_agree(reference, b'{"predictions": [[0.2, 0.8]]}', atol=1e-5, rtol=1e-4)
    assert differs is not None and "max difference 0.1" in differs
    assert "shape" in answers_agree(reference, b'{"predictions": [[0.1, 0.9, 0.0]]}', atol=1e-5, rtol=1e-4)


def test_anonymous_rss_is_printed_beside_rss_and_is_part_of_it():
    lines = render(_recorded()).splitlines()
    head = next(line for line in lines if line.startswith("server") and "RSS MB" in line)
    assert head.endswith("anon MB")
    row = next(line for line in lines if line.startswith("embedded ") and line.rstrip().endswith("191"))
    assert "480" in row
    own = os.getpid()  # this process: a real /proc reading, no server needed
    assert 0 < tree_rss_anon_mb(own) < tree_rss_mb(own)


def test_the_json_feeds_loadtest_compare_which_flags_a_slower_embedded_server(tmp_path):
    baseline = _recorded()
    slower = copy.deepcopy(baseline)
    for rounds in slower["servers"]["digits"]["embedded"]["points"].values():
        for point in rounds:
            point["rps"] /= 2
    paths = []
    for name, measurements in (("baseline", baseline), ("candidate", slower)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({**measurements, "series": comparable_series(measurements)}))
        paths.append(path)
    same = compare_results(load_result(paths[0]), load_result(paths[0]))
    assert same and not [v for v in same if v.verdict == "regression"]
    worse = {(v.series, v.level) for v in compare_results(load_result(paths[0]), load_result(paths[1]))
             if v.verdict == "regression"}
    assert ("digits/embedded", "rest c=32") in worse
    assert all(label == "digits/embedded" for label, _ in worse)
