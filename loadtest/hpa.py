"""The Kubernetes HorizontalPodAutoscaler's replica computation, step by step (``autoscaling/v2``).

A port of the controller's arithmetic for a ``Pods`` metric with an
``AverageValue`` target (kube-controller-manager ``podautoscaler``:
``replica_calculator.go`` ``calcPlainMetricReplicas`` and ``horizontal.go``
``stabilizeRecommendationWithBehaviors`` / ``convertDesiredReplicasWithBehaviorRate``),
so that the capacity planner can replay it against a traffic profile:

1. ``usage = mean(metric of the pods that report one) / target``. Within the
   tolerance (``|usage - 1| <= 0.1``) and with every pod reporting, nothing
   changes; otherwise ``desired = ceil(usage * reporting pods)``.
2. Pods with no metric yet (still starting) count as 0 when scaling up and as
   exactly the target when scaling down; the ratio is recomputed with them, and
   if it falls within the tolerance or reverses direction nothing changes.
3. Stabilization: the recommendation is clamped between the lowest
   recommendation of the scale-up window and the highest of the scale-down
   window (each including this one), starting from the current count.
4. Rate policies (``Pods``/``Percent`` per ``periodSeconds``, ``selectPolicy``
   ``Max``/``Min``/``Disabled``) bound the change from the count at the start of
   each period; then ``minReplicas``/``maxReplicas``.

Defaults are Kubernetes' (sync period 15 s, tolerance 0.1, scale-up window 0 s
with ``max(100 %, 4 pods) per 15 s``, scale-down window 300 s with 100 % per 15 s).
Pure arithmetic, no clock: the caller passes the time of each sync.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

# A manifest is read as parsed YAML gives it (Any): its shape is Kubernetes' autoscaling/v2.
__all__ = [
    "ScalingPolicy",
    "ScalingRules",
    "HPASpec",
    "HPAController",
    "metric_replicas",
    "spec_from_manifest",
    "DEFAULT_SCALE_UP",
    "DEFAULT_SCALE_DOWN",
]


@dataclass(frozen=True)
class ScalingPolicy:
    """``behavior.scaleUp|scaleDown.policies[]``: ``type`` ``Pods`` or ``Percent``, ``value`` per ``period_s``."""

    type: str
    value: int
    period_s: float

    def __post_init__(self) -> None:
        if self.type not in ("Pods", "Percent"):
            raise ValueError(f"a scaling policy's type is Pods or Percent, got {self.type!r}")
        if self.value <= 0 or self.period_s <= 0:
            raise ValueError("a scaling policy's value and periodSeconds must be positive")


@dataclass(frozen=True)
class ScalingRules:
    """``behavior.scaleUp`` or ``behavior.scaleDown``."""

    stabilization_window_s: float
    policies: tuple[ScalingPolicy, ...]
    select_policy: str = "Max"

    def __post_init__(self) -> None:
        if self.select_policy not in ("Max", "Min", "Disabled"):
            raise ValueError(f"selectPolicy is Max, Min or Disabled, got {self.select_policy!r}")


DEFAULT_SCALE_UP = ScalingRules(0.0, (ScalingPolicy("Percent", 100, 15.0), ScalingPolicy("Pods", 4, 15.0)))
DEFAULT_SCALE_DOWN = ScalingRules(300.0, (ScalingPolicy("Percent", 100, 15.0),))


@dataclass(frozen=True)
class HPASpec:
    """An HPA on one ``Pods`` metric: ``target`` is its ``averageValue`` per pod."""

    target: float
    min_replicas: int = 1
    max_replicas: int = 10
    tolerance: float = 0.1
    sync_period_s: float = 15.0
    scale_up: ScalingRules = DEFAULT_SCALE_UP
    scale_down: ScalingRules = DEFAULT_SCALE_DOWN

    def __post_init__(self) -> None:
        if self.target <= 0:
            raise ValueError("the HPA target must be positive")
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"need 1 <= minReplicas <= maxReplicas, got {self.min_replicas}, {self.max_replicas}")


def _rules(behavior: Mapping[str, Any], default: ScalingRules) -> ScalingRules:
    if not behavior:
        return default
    policies = tuple(ScalingPolicy(p["type"], int(p["value"]), float(p["periodSeconds"]))
                     for p in behavior.get("policies") or ()) or default.policies
    window = behavior.get("stabilizationWindowSeconds")
    return ScalingRules(default.stabilization_window_s if window is None else float(window), policies,
                        behavior.get("selectPolicy", "Max"))


def spec_from_manifest(hpa: Mapping[str, Any], target: float, *, tolerance: float = 0.1,
                       sync_period_s: float = 15.0) -> HPASpec:
    """An ``HPASpec`` from an ``autoscaling/v2`` HorizontalPodAutoscaler object (parsed YAML).

    ``minReplicas``, ``maxReplicas`` and ``behavior`` come from the object,
    with Kubernetes' defaults for what it leaves out; ``target`` is the
    per-pod value to simulate (the manifest's may be a placeholder).
    """
    if hpa.get("kind") != "HorizontalPodAutoscaler":
        raise ValueError(f"not a HorizontalPodAutoscaler: kind {hpa.get('kind')!r}")
    spec = hpa.get("spec") or {}
    behavior = spec.get("behavior") or {}
    return HPASpec(target=target, min_replicas=int(spec.get("minReplicas", 1)),
                   max_replicas=int(spec["maxReplicas"]), tolerance=tolerance, sync_period_s=sync_period_s,
                   scale_up=_rules(behavior.get("scaleUp") or {}, DEFAULT_SCALE_UP),
                   scale_down=_rules(behavior.get("scaleDown") or {}, DEFAULT_SCALE_DOWN))


def metric_replicas(current: int, metrics: Sequence[float], missing: int, target: float,
                    tolerance: float = 0.1) -> int:
    """``calcPlainMetricReplicas``: the replica count one ``Pods`` metric asks for.

    ``current`` is the scale target's replica count, ``metrics`` the values of
    the pods that report one, ``missing`` the pods that do not (yet).
    """
    if not metrics:
        return current  # no pod reports: the controller cannot compute a ratio and keeps the count
    usage = sum(metrics) / len(metrics) / target
    if missing == 0:
        if abs(1.0 - usage) <= tolerance:
            return current
        return math.ceil(usage * len(metrics))
    filled = list(metrics) + [target if usage < 1.0 else 0.0] * missing
    new_usage = sum(filled) / len(filled) / target
    if abs(1.0 - new_usage) <= tolerance or (usage < 1.0 < new_usage) or (usage > 1.0 > new_usage):
        return current
    replicas = math.ceil(new_usage * len(filled))
    if (new_usage < 1.0 and replicas > current) or (new_usage > 1.0 and replicas < current):
        return current
    return replicas


@dataclass
class _Event:
    time: float
    value: int


@dataclass
class HPAController:
    """One HPA's state across syncs: its recommendations and scale events (``horizontal.go``)."""

    spec: HPASpec
    recommendations: list[_Event] = field(default_factory=list)
    scale_up_events: list[_Event] = field(default_factory=list)
    scale_down_events: list[_Event] = field(default_factory=list)

    def sync(self, now: float, current: int, metrics: Sequence[float], missing: int = 0) -> int:
        """The replica count after the sync at ``now`` (seconds); records the scale event if it changes."""
        spec = self.spec
        if current > spec.max_replicas:
            desired = spec.max_replicas
        elif current < spec.min_replicas:
            desired = spec.min_replicas
        else:
            proposed = metric_replicas(current, metrics, missing, spec.target, spec.tolerance)
            desired = self._rate_limited(now, current, self._stabilized(now, current, proposed))
        if desired > current:
            self.scale_up_events.append(_Event(now, desired - current))
        elif desired < current:
            self.scale_down_events.append(_Event(now, current - desired))
        self._forget(now)
        return desired

    def _stabilized(self, now: float, current: int, proposed: int) -> int:
        up_cutoff = now - self.spec.scale_up.stabilization_window_s
        down_cutoff = now - self.spec.scale_down.stabilization_window_s
        up = min([r.value for r in self.recommendations if r.time > up_cutoff] + [proposed])
        down = max([r.value for r in self.recommendations if r.time > down_cutoff] + [proposed])
        self.recommendations.append(_Event(now, proposed))
        return min(max(current, up), down)

    def _rate_limited(self, now: float, current: int, desired: int) -> int:
        spec = self.spec
        if desired > current:
            limit = max(current, self._limit(now, current, spec.scale_up, up=True))
            return min(desired, spec.max_replicas, limit)
        if desired < current:
            limit = min(current, self._limit(now, current, spec.scale_down, up=False))
            return max(desired, spec.min_replicas, limit)
        return desired

    def _limit(self, now: float, current: int, rules: ScalingRules, *, up: bool) -> int:
        if rules.select_policy == "Disabled":
            return current
        proposals = []
        for policy in rules.policies:
            start = (current - self._changed(now, policy.period_s, self.scale_up_events)
                     + self._changed(now, policy.period_s, self.scale_down_events))
            if policy.type == "Pods":
                proposals.append(start + policy.value if up else start - policy.value)
            elif up:
                proposals.append(math.ceil(start * (1 + policy.value / 100)))
            else:
                proposals.append(int(start * (1 - policy.value / 100)))
        # Max picks the largest change: the highest limit up, the lowest limit down; Min the opposite.
        largest = (rules.select_policy == "Max") == up
        return max(proposals) if largest else min(proposals)

    @staticmethod
    def _changed(now: float, period_s: float, events: Sequence[_Event]) -> int:
        return sum(e.value for e in events if e.time > now - period_s)

    def _forget(self, now: float) -> None:
        spec = self.spec
        keep = max(spec.scale_up.stabilization_window_s, spec.scale_down.stabilization_window_s)
        self.recommendations = [r for r in self.recommendations if r.time > now - keep]
        longest = max([p.period_s for p in spec.scale_up.policies + spec.scale_down.policies] + [0.0])
        self.scale_up_events = [e for e in self.scale_up_events if e.time > now - longest]
        self.scale_down_events = [e for e in self.scale_down_events if e.time > now - longest]
