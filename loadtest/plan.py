"""Capacity planning from one replica's sweep: replicas, the HPA target, resource hours, autoscaling replayed.

``python -m loadtest plan --sweep out/sweep/sweep.json --target-rps 10000 --p99-ms 50 --headroom 0.3``

1. One series of the sweep (``--series``; the first by default) becomes a
   ``LatencyModel``: p99 against per-replica throughput, from the levels
   measured without errors.
2. The **per-pod rate within budget** is the highest rate whose interpolated
   p99 is within ``--p99-ms`` (at most the highest rate measured). The **HPA
   target** (the ``averageValue`` of the per-pod requests/s metric) is that rate
   times ``1 - headroom``; **replicas** = ``ceil(target rps / HPA target)``,
   the count the HPA settles on at the target rate; **resource hours per day**
   = replicas x ``--per-replica`` (CPUs or GPUs) x 24.
3. Each traffic profile (``loadtest.fleet``: diurnal, a 10x spike in 60 s, a
   slow ramp, peaking at the target rate) is replayed against an HPA
   (``loadtest.hpa``) with that target and the ``minReplicas``, ``maxReplicas``
   and ``behavior`` of ``--hpa FILE`` (the manifest you deploy; else Kubernetes'
   defaults, min 2, max twice the plan); pods start ``--startup-s`` after they
   are asked for (default: the cold start the sweep measured when it started
   the server: process, model load, warmup). Reported per profile: SLO-violation
   minutes (seconds whose p99 was over budget, or whose ready pods were over
   the measured capacity), replica-hours and the peak replica count, with a PNG
   of load, replicas and p99 over time.

Outputs in ``--out`` (default ``<checkout>/out/plan``): ``plan.json`` and
``plan-<profile>.png``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

import yaml

from loadtest.fleet import PROFILES, LatencyModel, SimulationResult, profile, simulate
from loadtest.hpa import HPASpec, ScalingRules, spec_from_manifest
from loadtest.options import UsageError
from loadtest.plots import plot_simulation
from serving.checkout import REPO_ROOT

if TYPE_CHECKING:
    from serving.codec import JSON

__all__ = [
    "MeasuredReplica",
    "CapacityPlan",
    "load_sweep",
    "plan_capacity",
    "hpa_quantity",
    "add_arguments",
    "run_plan",
]


@dataclass(frozen=True)
class MeasuredReplica:
    """One replica as a sweep measured it: its latency curve and, if the sweep started it, its cold start."""

    series: str
    model: LatencyModel
    cold_start_s: Optional[float]
    cpus: Optional[int]
    dropped_levels: tuple[float, ...]
    generator_limited: bool
    unstable_levels: tuple[float, ...] = ()


@dataclass(frozen=True)
class CapacityPlan:
    """The steady-state answer for one target rate."""

    target_rps: float
    p99_budget_ms: float
    headroom: float
    rate_within_budget_rps: float
    hpa_target_rps: float
    replicas: int
    resource: str
    per_replica: float
    resource_hours_per_day: float


def load_sweep(path: Path, series: Optional[str] = None) -> MeasuredReplica:
    """The series ``series`` (label; default the first) of a ``python -m loadtest sweep`` JSON file.

    Levels with errors are left out of the model (they were past capacity).
    ``UsageError`` for a file that is not a sweep, an unknown label, or a
    series with no level measured without errors.
    """
    try:
        data = json.loads(Path(path).read_text())
        all_series, meta = data["series"], data.get("meta", {})
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageError(f"--sweep {path}: not a sweep's JSON (python -m loadtest sweep writes sweep.json): "
                         f"{error}") from None
    labels = [s["label"] for s in all_series]
    if not all_series or (series is not None and series not in labels):
        raise UsageError(f"--sweep {path}: no series {series!r}; it has: {', '.join(labels) or 'none'}")
    chosen = all_series[labels.index(series)] if series else all_series[0]
    levels = chosen["levels"]
    clean = [lvl for lvl in levels if lvl["errors"] == 0]
    if not clean:
        raise UsageError(f"--sweep {path}: series {chosen['label']} has no level without errors")
    model = LatencyModel.from_points([(lvl["throughput_rps"], lvl["p99_ms"]) for lvl in clean])
    cold = (meta.get("cold_start_s") or {}).get(chosen.get("batching"))
    return MeasuredReplica(chosen["label"], model, cold, meta.get("cpus"),
                           tuple(lvl["level"] for lvl in levels if lvl["errors"]),
                           any(lvl.get("generator_limited") for lvl in clean),
                           tuple(lvl["level"] for lvl in clean if not lvl.get("stable", True)))


def plan_capacity(model: LatencyModel, *, target_rps: float, p99_budget_ms: float, headroom: float,
                  resource: str = "cpu", per_replica: float = 1.0) -> CapacityPlan:
    """Replicas and the HPA target for ``target_rps`` within ``p99_budget_ms`` with ``headroom`` spare."""
    if target_rps <= 0 or p99_budget_ms <= 0:
        raise UsageError("--target-rps and --p99-ms must be positive")
    if not 0 <= headroom < 1:
        raise UsageError(f"--headroom is a fraction in [0, 1), got {headroom}")
    within = model.rate_within(p99_budget_ms)
    if within <= 0:
        raise UsageError(f"no measured rate keeps p99 within {p99_budget_ms:g} ms: the lowest level's p99 is "
                         f"{model.p99_ms[0]:.2f} ms (sweep lower concurrency, or raise --p99-ms)")
    target = _floor_milli(within * (1 - headroom))
    replicas = math.ceil(target_rps / target)
    return CapacityPlan(target_rps, p99_budget_ms, headroom, within, target, replicas, resource, per_replica,
                        replicas * per_replica * 24)


def _floor_milli(value: float) -> float:
    return math.floor(value * 1000) / 1000


def hpa_quantity(value: float) -> str:
    """``value`` as a Kubernetes quantity for ``averageValue``: ``"1251"``, or milli-units ``"12500m"``."""
    milli = math.floor(value * 1000 + 1e-6)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``plan`` subcommand's flags."""
    parser.add_argument("--sweep", type=Path, required=True, help="a sweep's JSON (python -m loadtest sweep)")
    parser.add_argument("--series", default=None, help="the series label to plan with (default: the first)")
    parser.add_argument("--target-rps", type=float, required=True, help="the fleet's peak rate, requests/s")
    parser.add_argument("--p99-ms", type=float, required=True, help="p99 budget per request, ms")
    parser.add_argument("--headroom", type=float, default=0.3,
                        help="spare fraction of the within-budget rate per pod (default 0.3)")
    cost = parser.add_argument_group("resources")
    cost.add_argument("--resource", choices=("cpu", "gpu"), default="cpu", help="what a replica is billed in")
    cost.add_argument("--per-replica", type=float, default=None,
                      help="CPUs or GPUs per replica (default: gpu 1; cpu the sweep host's CPU count)")
    hpa = parser.add_argument_group("HPA (a flag wins over --hpa, which wins over Kubernetes' defaults)")
    hpa.add_argument("--hpa", type=Path, default=None,
                     help="an autoscaling/v2 HPA manifest (YAML): minReplicas, maxReplicas and behavior to simulate, "
                          "e.g. the rendered deploy/k8s overlay")
    hpa.add_argument("--min-replicas", type=int, default=None, help="minReplicas (default 2)")
    hpa.add_argument("--max-replicas", type=int, default=None, help="maxReplicas (default 2 x the plan's replicas)")
    hpa.add_argument("--tolerance", type=float, default=0.1, help="the controller's tolerance (default 0.1)")
    hpa.add_argument("--sync-period", type=float, default=15.0, help="controller sync period, s (default 15)")
    hpa.add_argument("--scale-up-window", type=float, default=None,
                     help="scaleUp stabilizationWindowSeconds (default 0)")
    hpa.add_argument("--scale-down-window", type=float, default=None,
                     help="scaleDown stabilizationWindowSeconds (default 300)")
    hpa.add_argument("--metric-window", type=float, default=60.0,
                     help="seconds the per-pod rate is averaged over, the adapter's rate[..] (default 60)")
    hpa.add_argument("--startup-s", type=float, default=None,
                     help="seconds from a pod's creation to ready (default: the cold start the sweep measured)")
    parser.add_argument("--profile", default=",".join(PROFILES),
                        help=f"traffic profiles to simulate, comma list of {', '.join(PROFILES)} (default all)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "plan",
                        help="output directory (default <checkout>/out/plan)")
    parser.set_defaults(func=run_plan)


def _startup_s(args: argparse.Namespace, replica: MeasuredReplica) -> float:
    if args.startup_s is not None:
        if args.startup_s < 0:
            raise UsageError("--startup-s must not be negative")
        return args.startup_s
    if replica.cold_start_s is None:
        raise UsageError(f"--sweep {args.sweep} has no measured cold start for {replica.series} (the sweep ran "
                         f"against a server it did not start): give --startup-s")
    return replica.cold_start_s


def _per_replica(args: argparse.Namespace, replica: MeasuredReplica) -> float:
    if args.per_replica is not None:
        return args.per_replica
    return 1.0 if args.resource == "gpu" else float(replica.cpus or 1)


def _read_hpa(path: Path) -> dict[str, JSON]:
    try:
        documents = list(yaml.safe_load_all(Path(path).read_text()))
    except (OSError, yaml.YAMLError) as error:
        raise UsageError(f"--hpa {path}: {error}") from None
    for doc in documents:
        if isinstance(doc, dict) and doc.get("kind") == "HorizontalPodAutoscaler":
            return doc
    raise UsageError(f"--hpa {path}: no HorizontalPodAutoscaler in the file")


def _hpa_spec(args: argparse.Namespace, plan: CapacityPlan) -> HPASpec:
    try:
        if args.hpa:
            spec = spec_from_manifest(_read_hpa(args.hpa), plan.hpa_target_rps, tolerance=args.tolerance,
                                      sync_period_s=args.sync_period)
        else:
            minimum = args.min_replicas or 2
            spec = HPASpec(target=plan.hpa_target_rps, min_replicas=minimum,
                           max_replicas=max(2 * plan.replicas, minimum), tolerance=args.tolerance,
                           sync_period_s=args.sync_period)
        # the flags override the manifest in one replace: HPASpec checks min <= max on the result only
        return dataclasses.replace(
            spec,
            min_replicas=spec.min_replicas if args.min_replicas is None else args.min_replicas,
            max_replicas=spec.max_replicas if args.max_replicas is None else args.max_replicas,
            scale_up=(spec.scale_up if args.scale_up_window is None
                      else dataclasses.replace(spec.scale_up, stabilization_window_s=args.scale_up_window)),
            scale_down=(spec.scale_down if args.scale_down_window is None
                        else dataclasses.replace(spec.scale_down, stabilization_window_s=args.scale_down_window)))
    except (ValueError, KeyError) as error:
        raise UsageError(f"HPA settings: {error}") from None


def run_plan(args: argparse.Namespace) -> int:
    """The ``plan`` subcommand: print the plan, simulate each profile, write ``plan.json`` and the PNGs."""
    replica = load_sweep(args.sweep, args.series)
    plan = plan_capacity(replica.model, target_rps=args.target_rps, p99_budget_ms=args.p99_ms,
                         headroom=args.headroom, resource=args.resource, per_replica=_per_replica(args, replica))
    startup = _startup_s(args, replica)
    spec = _hpa_spec(args, plan)
    names = [n.strip() for n in args.profile.split(",") if n.strip()]
    unknown = [n for n in names if n not in PROFILES]
    if unknown or not names:
        raise UsageError(f"--profile takes {', '.join(PROFILES)}; got {args.profile!r}")
    for line in _plan_lines(replica, plan, spec, startup):
        print(line)
    results: list[SimulationResult] = []
    pngs = {}
    for name in names:
        result = simulate(profile(name, args.target_rps), replica.model, spec, p99_budget_ms=args.p99_ms,
                          startup_s=startup, metric_window_s=args.metric_window)
        results.append(result)
        pngs[name] = plot_simulation(result, Path(args.out) / f"plan-{name}.png", p99_budget_ms=args.p99_ms,
                                     capacity_rps=replica.model.capacity_rps)
        print(f"{name:>8}: {result.violation_minutes:7.2f} SLO-violation minutes, "
              f"{result.replica_hours:8.2f} replica-hours over {result.duration_s / 3600:.2f} h, "
              f"peak {result.peak_replicas} replicas  ({result.description})")
    out = Path(args.out) / "plan.json"
    out.write_text(json.dumps(_report(args, replica, plan, spec, startup, results), indent=2))
    print("wrote " + ", ".join(str(p) for p in [out, *pngs.values()]))
    return 0


def _plan_lines(replica: MeasuredReplica, plan: CapacityPlan, spec: HPASpec, startup: float) -> list[str]:
    unit = "GPU" if plan.resource == "gpu" else "CPU"
    dropped = ", ".join(f"{v:g}" for v in replica.dropped_levels)
    lines = [
        f"series {replica.series}: measured capacity {replica.model.capacity_rps:.1f} req/s per replica "
        f"(levels without errors{'; left out with errors: ' + dropped if dropped else ''})",
        f"per-pod rate within p99 {plan.p99_budget_ms:g} ms: {plan.rate_within_budget_rps:.1f} req/s",
        f"HPA target: {plan.hpa_target_rps:g} req/s per pod (averageValue: \"{hpa_quantity(plan.hpa_target_rps)}\", "
        f"headroom {plan.headroom:g})",
        f"replicas for {plan.target_rps:g} req/s: {plan.replicas}",
        f"{unit}-hours per day at that count: {plan.resource_hours_per_day:g} "
        f"({plan.per_replica:g} {unit} per replica)",
        f"simulated HPA: min {spec.min_replicas}, max {spec.max_replicas}, tolerance {spec.tolerance:g}, "
        f"sync {spec.sync_period_s:g} s, pod start-up {startup:.1f} s",
        f"  scale-up: window {spec.scale_up.stabilization_window_s:g} s, {_policies(spec.scale_up)}",
        f"  scale-down: window {spec.scale_down.stabilization_window_s:g} s, {_policies(spec.scale_down)}",
    ]
    if spec.max_replicas < plan.replicas:
        lines.append(f"WARNING: maxReplicas {spec.max_replicas} is below the {plan.replicas} replicas the target "
                     f"rate needs: the simulated peaks will break the SLO")
    if replica.unstable_levels:
        lines.append("WARNING: levels " + ", ".join(f"{v:g}" for v in replica.unstable_levels)
                     + " never became stable: their numbers are noise-prone; sweep again on a quieter machine")
    if replica.generator_limited:
        lines.append("WARNING: some levels were GENERATOR-LIMITED: the replica may do more than measured")
    return lines


def _policies(rules: ScalingRules) -> str:
    each = ", ".join(f"{p.value}{'%' if p.type == 'Percent' else ' pods'} per {p.period_s:g} s" for p in rules.policies)
    return f"{rules.select_policy} of [{each}]"


def _report(args: argparse.Namespace, replica: MeasuredReplica, plan: CapacityPlan, spec: HPASpec,
            startup: float, results: Sequence[SimulationResult]) -> dict[str, JSON]:
    return {
        "sweep": str(args.sweep), "series": replica.series,
        "latency_model": {"rates_rps": list(replica.model.rates), "p99_ms": list(replica.model.p99_ms)},
        "plan": {**asdict(plan), "hpa_average_value": hpa_quantity(plan.hpa_target_rps)},
        "hpa": {**asdict(spec), "source": str(args.hpa) if args.hpa else "flags and Kubernetes defaults",
                "metric_window_s": args.metric_window, "startup_s": startup},
        "profiles": [r.summary() for r in results],
    }
