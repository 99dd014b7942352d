"""The capacity planner: the HPA's arithmetic against hand-computed steps, the fleet simulation, the CLI.

Every expected number below is worked out by hand in the comment beside it,
from the controller's rules (kube-controller-manager ``podautoscaler``).
"""
from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.fleet import LatencyModel, TrafficProfile, profile, simulate
from loadtest.hpa import HPAController, HPASpec, ScalingPolicy, ScalingRules, metric_replicas, spec_from_manifest
from loadtest.options import UsageError
from loadtest.plan import hpa_quantity, load_sweep, plan_capacity
from loadtest.sweep import LevelResult, Series, write_outputs
from serving.checkout import REPO_ROOT

PNG = b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- one metric's proposal

def test_the_documented_example_50_replicas_at_90_against_75_gives_60():
    assert metric_replicas(50, [90.0] * 50, 0, 75.0) == 60  # ceil(50 * 90/75)


def test_a_ratio_within_the_tolerance_keeps_the_count_and_one_outside_scales():
    assert metric_replicas(4, [109.0] * 4, 0, 100.0) == 4  # |1.09 - 1| <= 0.1
    assert metric_replicas(4, [92.0] * 4, 0, 100.0) == 4  # |0.92 - 1| <= 0.1
    assert metric_replicas(4, [112.0] * 4, 0, 100.0) == 5  # ceil(1.12 * 4) = ceil(4.48)
    assert metric_replicas(4, [80.0] * 4, 0, 100.0) == 4  # ceil(0.8 * 4) = ceil(3.2) = 4
    assert metric_replicas(4, [70.0] * 4, 0, 100.0) == 3  # ceil(2.8)
    assert metric_replicas(4, [109.0] * 4, 0, 100.0, tolerance=0.05) == 5  # ceil(4.36)


def test_starting_pods_count_as_zero_on_the_way_up_and_as_the_target_on_the_way_down():
    # 2 ready at 200, 2 starting: 200/100 = 2 > 1, the starting pods count 0: mean 100, ratio 1.0 -> no change
    assert metric_replicas(4, [200.0, 200.0], 2, 100.0) == 4
    # 2 ready at 300: mean with zeros 150, ratio 1.5 -> ceil(1.5 * 4) = 6
    assert metric_replicas(4, [300.0, 300.0], 2, 100.0) == 6
    # 2 ready at 50, 2 starting: 0.5 < 1, the starting pods count 100: mean 75 -> ceil(0.75 * 4) = 3
    assert metric_replicas(4, [50.0, 50.0], 2, 100.0) == 3
    # no pod reports a metric: nothing to compute, the count stays
    assert metric_replicas(3, [], 3, 100.0) == 3


# ---------------------------------------------------------------- stabilization windows and rate policies

def _no_rate_limit(window_s: float) -> ScalingRules:
    return ScalingRules(window_s, (ScalingPolicy("Percent", 1000, 15.0),))


def test_scale_down_waits_for_the_highest_recommendation_of_the_window_to_leave_it():
    hpa = HPAController(HPASpec(target=100.0, min_replicas=1, max_replicas=20))  # down window 300 s
    assert hpa.sync(0, 10, [100.0] * 10) == 10  # recommendation 10 recorded at t=0
    for t in range(15, 300, 15):
        # each sync proposes ceil(0.5 * 10) = 5, but max(10 at t=0, 5, ...) = 10 holds the count
        assert hpa.sync(t, 10, [50.0] * 10) == 10, t
    # at t=300 the t=0 recommendation is out of (0, 300]: max is 5; 100 % per 15 s allows it
    assert hpa.sync(300, 10, [50.0] * 10) == 5


def test_scale_up_window_takes_the_lowest_recommendation_in_it():
    spec = HPASpec(target=100.0, max_replicas=20, scale_up=_no_rate_limit(60.0))
    hpa = HPAController(spec)
    assert hpa.sync(0, 4, [100.0] * 4) == 4  # recommendation 4 at t=0
    assert hpa.sync(15, 4, [200.0] * 4) == 4  # proposes 8; min(4 at t=0, 8) = 4
    assert hpa.sync(30, 4, [200.0] * 4) == 4
    assert hpa.sync(45, 4, [200.0] * 4) == 4
    assert hpa.sync(60, 4, [200.0] * 4) == 8  # t=0 left (0, 60]: min(8, 8, 8, 8) = 8


def test_default_scale_up_policy_is_the_larger_of_doubling_and_four_pods_per_15_s():
    hpa = HPAController(HPASpec(target=10.0, min_replicas=1, max_replicas=50))
    assert hpa.sync(0, 2, [100.0] * 2) == 6  # proposes 20; limit max(ceil(2 * 2), 2 + 4) = 6
    # 5 s later the +4 event is inside the 15 s period: the period started at 2, so the limit is still 6
    assert hpa.sync(5, 6, [100.0] * 6) == 6
    # at t=15 the t=0 event left (0, 15]: start 6, limit max(12, 10) = 12 (proposal ceil(10 * 6) = 60)
    assert hpa.sync(15, 6, [100.0] * 6) == 12
    # t=30: the proposal is ceil(12 * 100/10) = 120; the limit max(2 * 12, 12 + 4) = 24
    assert hpa.sync(30, 12, [100.0] * 12) == 24
    assert hpa.sync(45, 24, [100.0] * 24) == 48
    assert hpa.sync(60, 48, [100.0] * 48) == 50  # maxReplicas


def test_a_disabled_scale_down_never_removes_pods_and_bounds_apply_first():
    spec = HPASpec(target=100.0, min_replicas=2, max_replicas=5,
                   scale_down=ScalingRules(0.0, (ScalingPolicy("Percent", 100, 15.0),), select_policy="Disabled"))
    hpa = HPAController(spec)
    assert hpa.sync(0, 4, [10.0] * 4) == 4
    assert hpa.sync(15, 8, [500.0] * 8) == 5  # above maxReplicas: brought to max before any metric
    assert hpa.sync(30, 1, [500.0]) == 2  # below minReplicas: brought to min


# The deploy/k8s HPA's shape (base/hpa.yaml): slower, guarded scale-up, a gentle scale-down.
HPA_MANIFEST = """\
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: tfserving}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: tfserving}
  minReplicas: 2
  maxReplicas: 20
  metrics:
    - type: Pods
      pods: {metric: {name: tfserving_requests_per_second}, target: {type: AverageValue, averageValue: "100"}}
  behavior:
    scaleUp:
      stabilizationWindowSeconds: 30
      policies: [{type: Percent, value: 100, periodSeconds: 30}, {type: Pods, value: 4, periodSeconds: 30}]
      selectPolicy: Max
    scaleDown:
      stabilizationWindowSeconds: 300
      policies: [{type: Percent, value: 10, periodSeconds: 60}]
      selectPolicy: Min
"""


def test_a_manifests_behavior_drives_the_steps():
    import yaml

    spec = spec_from_manifest(yaml.safe_load(HPA_MANIFEST), target=10.0)
    assert (spec.min_replicas, spec.max_replicas) == (2, 20)
    assert spec.scale_up == ScalingRules(30.0, (ScalingPolicy("Percent", 100, 30.0), ScalingPolicy("Pods", 4, 30.0)))
    assert spec.scale_down == ScalingRules(300.0, (ScalingPolicy("Percent", 10, 60.0),), "Min")
    hpa = HPAController(spec)
    assert hpa.sync(0, 2, [100.0] * 2) == 6  # proposes 20; limit max(2 * 2, 2 + 4) = 6
    # t=15: proposes 60, the window's lowest is 20 (t=0); the +4 of t=0 is inside the 30 s period: limit 6
    assert hpa.sync(15, 6, [100.0] * 6) == 6
    # t=30: the t=0 event left (0, 30]: start 6, limit max(12, 10) = 12; window (0, 30] holds 60 and 60
    assert hpa.sync(30, 6, [100.0] * 6) == 12
    # scale-down, Min of 10 % per 60 s: from 20 at most int(20 * 0.9) = 18 once the window allows
    down = HPAController(dataclasses.replace(spec, scale_down=dataclasses.replace(spec.scale_down,
                                                                                  stabilization_window_s=0.0)))
    assert down.sync(0, 20, [1.0] * 20) == 18
    assert down.sync(15, 18, [1.0] * 18) == 18  # -2 within the 60 s period: the period started at 20
    assert down.sync(60, 18, [1.0] * 18) == 16  # int(18 * 0.9) = 16


# ---------------------------------------------------------------- the latency model and the plan

def test_latency_model_drops_saturated_levels_and_interpolates_the_budget_rate():
    model = LatencyModel.from_points([(100.0, 10.0), (200.0, 30.0), (190.0, 40.0), (250.0, 25.0)])
    assert model.rates == (100.0, 200.0, 250.0)  # 190 added no throughput over 200
    assert model.p99_ms == (10.0, 30.0, 30.0)  # p99 never falls as the rate rises
    assert model.rate_within(20.0) == pytest.approx(150.0)  # 100 + 100 * (20 - 10) / (30 - 10)
    assert model.rate_within(100.0) == 250.0  # every level within budget: the highest measured
    assert model.rate_within(5.0) == 0.0
    assert model.p99_at(50.0) == 10.0 and model.p99_at(150.0) == pytest.approx(20.0)
    assert model.p99_at(250.1) == math.inf  # beyond the measured capacity: overloaded


def test_plan_applies_the_headroom_and_rounds_replicas_up():
    model = LatencyModel.from_points([(100.0, 10.0), (200.0, 30.0)])
    plan = plan_capacity(model, target_rps=1000.0, p99_budget_ms=20.0, headroom=0.3, per_replica=2.0)
    assert plan.rate_within_budget_rps == pytest.approx(150.0)
    assert plan.hpa_target_rps == pytest.approx(105.0)  # 150 * 0.7
    assert plan.replicas == 10  # ceil(1000 / 105) = ceil(9.52)
    assert plan.resource_hours_per_day == 480.0  # 10 * 2 CPUs * 24 h
    assert hpa_quantity(105.0) == "105" and hpa_quantity(12.5) == "12500m"
    with pytest.raises(UsageError, match="lowest level's p99 is 10.00 ms"):
        plan_capacity(model, target_rps=1000.0, p99_budget_ms=5.0, headroom=0.3)


# ---------------------------------------------------------------- the simulation

def _step_load(before: float, after: float, at: int, duration: int) -> TrafficProfile:
    return TrafficProfile("step", duration, lambda t: before if t < at else after, "step")


def test_new_pods_serve_only_after_the_start_up_time_and_overload_counts_as_violation():
    model = LatencyModel((100.0,), (10.0,))  # flat 10 ms up to 100 req/s per pod, overloaded beyond
    spec = HPASpec(target=50.0, min_replicas=1, max_replicas=20)
    result = simulate(_step_load(100.0, 400.0, 100, 300), model, spec, p99_budget_ms=50.0, startup_s=30.0,
                      metric_window_s=1.0)
    line = result.timeline
    assert line.replicas[0] == 2 and line.ready[99] == 2  # settled: ceil(100 / 50)
    # t=105, first sync after the step: 400/2 = 200 per pod, ratio 4 -> 8, limited to max(2*2, 2+4) = 6
    assert line.replicas[105] == 2 and line.replicas[106] == 6
    # t=120: 2 ready at 200, 4 starting count 0: mean 66.7, ratio 1.33 -> ceil(8.0) = 8 (limit max(12, 10))
    assert line.replicas[121] == 8
    # the 4 pods asked for at t=105 are ready at 135, the 2 of t=120 at 150
    assert line.ready[134] == 2 and line.ready[135] == 6 and line.ready[149] == 6 and line.ready[150] == 8
    # 200 req/s per pod is over the measured 100 from t=100 to 134: 35 seconds; 400/6 is within
    assert result.violation_s == 35
    assert line.p99_ms[134] == math.inf and line.p99_ms[135] == 10.0
    assert result.peak_replicas == 8


def test_p99_over_budget_below_capacity_is_a_violation_and_replica_hours_integrate_the_pods():
    model = LatencyModel.from_points([(10.0, 5.0), (100.0, 95.0)])
    spec = HPASpec(target=1000.0, min_replicas=3, max_replicas=3)  # a fixed fleet of 3
    # 240 req/s over 3 pods = 80 per pod: p99 = 5 + 90 * 70/90 = 75 ms > 50 ms, every second
    result = simulate(_step_load(240.0, 240.0, 0, 3600), model, spec, p99_budget_ms=50.0, startup_s=0.0)
    assert result.violation_s == 3600 and result.violation_minutes == 60.0
    assert result.replica_hours == pytest.approx(3.0)
    assert max(result.timeline.p99_ms) == pytest.approx(75.0)


def test_profiles_peak_at_the_target_and_the_spike_rises_tenfold_in_60_s():
    spike = profile("spike", 10000.0)
    assert spike.rate(0) == 1000.0 and spike.rate(600) == 1000.0 and spike.rate(660) == 10000.0
    diurnal = profile("diurnal", 10000.0)
    assert diurnal.rate(43200) == pytest.approx(10000.0) and diurnal.duration_s == 86400
    ramp = profile("ramp", 10000.0)
    assert ramp.rate(0) == 1000.0 and ramp.rate(ramp.duration_s - 1) == 10000.0
    with pytest.raises(ValueError, match="unknown traffic profile"):
        profile("flash", 10.0)


# ---------------------------------------------------------------- the sweep file and the CLI

def _level(level: float, rps: float, p99: float, errors: int = 0) -> LevelResult:
    return LevelResult(level=level, mode="concurrency", throughput_rps=rps, p50_ms=p99 / 2, p90_ms=p99 * 0.8,
                       p95_ms=p99 * 0.9, p99_ms=p99, avg_ms=p99 / 2, requests=1000, errors=errors,
                       error_kinds={"RESOURCE_EXHAUSTED": errors} if errors else {}, stable=True, windows=3,
                       measured_s=6.0, client_cpu_pct=30.0)


def _write_sweep(out: Path, cold_start: dict) -> Path:
    series = Series("m/grpc/batching-off", "m", "grpc", "off",
                    [_level(1, 100.0, 10.0), _level(4, 200.0, 30.0), _level(8, 210.0, 90.0, errors=3)])
    return write_outputs([series], out, {"title": "t", "cpus": 2, "cold_start_s": cold_start})["json"]


def test_load_sweep_reads_what_sweep_writes_and_leaves_out_levels_with_errors(tmp_path):
    replica = load_sweep(_write_sweep(tmp_path, {"off": 4.5}))
    assert replica.model.rates == (100.0, 200.0) and replica.cold_start_s == 4.5 and replica.cpus == 2
    assert replica.dropped_levels == (8,) and replica.unstable_levels == ()
    with pytest.raises(UsageError, match="no series 'x'; it has: m/grpc/batching-off"):
        load_sweep(tmp_path / "sweep.json", "x")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(UsageError, match="not a sweep's JSON"):
        load_sweep(tmp_path / "bad.json")


def _plan_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loadtest", "plan", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)


def test_cli_prints_the_plan_and_writes_json_and_one_png_per_profile(tmp_path):
    sweep = _write_sweep(tmp_path / "sweep", {"off": 4.5})
    out = _plan_cli("--sweep", str(sweep), "--target-rps", "1000", "--p99-ms", "20", "--headroom", "0.3",
                    "--profile", "spike,ramp", "--out", str(tmp_path / "plan"))
    assert out.returncode == 0, out.stderr
    assert "HPA target: 105 req/s per pod" in out.stdout and "replicas for 1000 req/s: 10" in out.stdout
    report = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert report["plan"]["replicas"] == 10 and report["hpa"]["startup_s"] == 4.5
    assert [p["profile"] for p in report["profiles"]] == ["spike", "ramp"]
    assert (tmp_path / "plan" / "plan-spike.png").read_bytes()[:8] == PNG


def test_cli_simulates_the_hpa_manifest_with_flags_winning(tmp_path):
    sweep = _write_sweep(tmp_path / "sweep", {"off": 4.5})
    (tmp_path / "hpa.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n---\n" + HPA_MANIFEST)
    out = _plan_cli("--sweep", str(sweep), "--target-rps", "1000", "--p99-ms", "20", "--profile", "spike",
                    "--hpa", str(tmp_path / "hpa.yaml"), "--max-replicas", "12", "--out", str(tmp_path / "plan"))
    assert out.returncode == 0, out.stderr
    hpa = json.loads((tmp_path / "plan" / "plan.json").read_text())["hpa"]
    assert (hpa["min_replicas"], hpa["max_replicas"]) == (2, 12)
    assert hpa["scale_up"]["stabilization_window_s"] == 30.0 and hpa["scale_down"]["select_policy"] == "Min"
    assert "scale-down: window 300 s, Min of [10% per 60 s]" in out.stdout
    assert "maxReplicas" not in out.stdout  # 12 >= the 10 the plan needs: no warning
    low = _plan_cli("--sweep", str(sweep), "--target-rps", "1000", "--p99-ms", "20", "--profile", "spike",
                    "--hpa", str(tmp_path / "hpa.yaml"), "--max-replicas", "8", "--out", str(tmp_path / "low"))
    assert "WARNING: maxReplicas 8 is below the 10 replicas" in low.stdout


def test_cli_without_a_measured_cold_start_asks_for_startup_s(tmp_path):
    sweep = _write_sweep(tmp_path, {})
    out = _plan_cli("--sweep", str(sweep), "--target-rps", "1000", "--p99-ms", "20", "--out", str(tmp_path))
    assert out.returncode == 2 and "give --startup-s" in out.stderr


@pytest.mark.slow
def test_a_sweep_measured_here_plans_a_fleet(model_repo, tmp_path):
    """A real sweep (the embedded server started by the sweep, so its cold start is measured) feeds the planner."""
    sweep = subprocess.run(
        [sys.executable, "-m", "loadtest", "sweep", "--model-repo", str(model_repo), "--model", "digits",
         "--batching", "off", "--concurrency", "1,4", "--window", "0.7", "--stable-windows", "2",
         "--max-level-time", "4", "--warmup", "0.5", "--out", str(tmp_path / "sweep")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert sweep.returncode == 0, sweep.stdout + sweep.stderr
    meta = json.loads((tmp_path / "sweep" / "sweep.json").read_text())["meta"]
    assert meta["cold_start_s"]["off"] > 0
    out = _plan_cli("--sweep", str(tmp_path / "sweep" / "sweep.json"), "--target-rps", "10000", "--p99-ms", "50",
                    "--headroom", "0.3", "--profile", "spike", "--out", str(tmp_path / "plan"))
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads((tmp_path / "plan" / "plan.json").read_text())
    plan, rates = report["plan"], report["latency_model"]["rates_rps"]
    assert plan["hpa_target_rps"] <= 0.7 * max(rates) + 1e-3
    assert plan["replicas"] == math.ceil(10000 / plan["hpa_target_rps"])
    assert report["hpa"]["startup_s"] == meta["cold_start_s"]["off"]
    assert report["profiles"][0]["slo_violation_minutes"] >= 0
    assert (tmp_path / "plan" / "plan-spike.png").read_bytes()[:8] == PNG
