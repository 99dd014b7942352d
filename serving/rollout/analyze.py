"""Canary analysis: the same inputs to ``stable`` and ``canary``, interleaved, and a verdict.

:func:`replay` sends each batch of inputs to both sides through the SDK, in
``rounds``, alternating which side goes first, and records every answer, error
and latency. :func:`analyze` turns that into checks, each PASS, FAIL or
INCONCLUSIVE (the verdict is the worst of them: FAIL, then INCONCLUSIVE):

- the outputs (``serving.rollout.verdict``, one rule per output, shared with
  the live analysis): ``agreement:<output>`` (top-1 class) for class outputs
  and ``distribution:<output>`` for scores and regressions when the canary is
  a retrain; ``tolerance:<output>`` (element-wise) when both versions hold the
  same weights (an XLA or TF-TRT variant, a re-export) or when asked.
- ``latency:p50`` / ``latency:p99``: the canary/stable ratio of each round's
  percentile; FAIL when every round is over the limit, PASS when the median
  round is within it, INCONCLUSIVE otherwise (rounds disagree: a noisy machine).
- ``errors``: each side's error rate; FAIL when the canary's exceeds stable's
  by more than ``max_error_rate``, INCONCLUSIVE when stable itself fails that
  often (no baseline) or fewer than ``min_requests`` answers were compared.
- ``gateway``: refusals by the gateway's limiter (``serving.stack.endpoint.
  is_gateway_refusal``) are neither side's error: :func:`replay` paces itself
  (one call in flight, an optional ``max_rate``, and a gap between calls that
  doubles at each refusal and shrinks again with answers), waits and resends
  a refused call, within a retry budget shared by both sides (``Pacing``).
  Once the budget is spent, a refused call is left unanswered and the check is
  INCONCLUSIVE, saying so: the limiter, not the canary, decided that run.

Inputs (``serving.rollout.inputs.load_inputs``): the version's manifest golden
rows, its warmup records, a request capture (file, directory, time window),
or a file of the user's (``.npz``, a REST body ``.json``).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence

import numpy as np

from exporter.manifest import Manifest  # numpy only: the manifest reader imports no TensorFlow
from serving import codec, status
from serving.rollout import verdict
from serving.rollout.inputs import load_inputs, stable_manifest  # input loading has its own module
from serving.rollout.verdict import FAIL, INCONCLUSIVE, PASS, Check, worst
from serving.stack.endpoint import is_gateway_refusal

__all__ = ["PASS", "FAIL", "INCONCLUSIVE", "EXIT_CODES", "SameVersion", "Thresholds", "Pacing", "Side", "Check",
           "Report", "Replay", "stable_manifest", "compared_versions", "output_context", "load_inputs", "replay",
           "analyze", "gateway_error_rates", "worst"]

EXIT_CODES = {PASS: 0, FAIL: 1, INCONCLUSIVE: 2}


class SameVersion(ValueError):
    """Both sides resolve to one version: comparing it with itself would PASS and prove nothing (exit 2)."""


@dataclass(frozen=True)
class Thresholds:
    """The limits a canary is held to (the CLI's flags; docs/rollout.md says why these defaults)."""

    min_agreement: float = verdict.Rules.min_agreement  # the outputs' limits: serving.rollout.verdict.Rules
    atol: Optional[float] = None
    rtol: Optional[float] = None
    max_p50_ratio: float = 1.5      # rounds on a shared machine spread by tens of percent
    max_p99_ratio: float = 2.0      # a tail from a few dozen calls is noisier still
    max_error_rate: float = 0.01    # canary's error rate over stable's
    min_requests: int = 20          # answers per side below which nothing is concluded
    mode: str = verdict.Rules.mode  # auto | retrain | elementwise
    max_row_diff: float = verdict.Rules.max_row_diff
    max_shift: float = verdict.Rules.max_shift
    kinds: Mapping[str, str] = field(default_factory=dict)  # per output: top1|distribution|elementwise|equal|ignore

    def rules(self, top1: Optional[str] = None) -> verdict.Rules:
        """The outputs' rules; ``top1`` (an output named by the user as the class output) unless kinds says."""
        kinds = {top1: "top1", **self.kinds} if top1 else dict(self.kinds)
        return verdict.Rules(self.mode, self.min_agreement, self.max_row_diff, self.max_shift, self.atol, self.rtol,
                             kinds)


@dataclass(frozen=True)
class Pacing:
    """How :func:`replay` paces its calls through a gateway that limits each client's rate and concurrency.

    One call is in flight at a time. ``max_rate`` (calls per second, None: no
    fixed cap) spaces call starts; a gateway refusal doubles the gap between
    calls (from ``initial_backoff`` up to ``max_backoff`` seconds), waits that
    long and resends the call; each answer shrinks the gap by ``recovery``.
    At most ``retry_budget`` refusals are resent in a whole replay (both sides);
    after that a refused call stays unanswered and the analysis is INCONCLUSIVE.
    """

    max_rate: Optional[float] = None
    retry_budget: int = 400
    initial_backoff: float = 0.02
    max_backoff: float = 2.0
    recovery: float = 0.9

    def __post_init__(self) -> None:
        if self.max_rate is not None and self.max_rate <= 0:
            raise ValueError(f"max_rate must be positive, got {self.max_rate}")
        if self.retry_budget < 0:
            raise ValueError(f"retry_budget must be at least 0, got {self.retry_budget}")


@dataclass(frozen=True)
class Side:
    """One side of the comparison (``stable`` or ``canary``): how to predict a batch on it (an SDK call)."""

    name: str
    predict: Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]


@dataclass
class Replay:
    """What :func:`replay` recorded: per side, per round, the latencies; the answers; the errors.

    ``refusals`` counts the gateway limiter's refusals per side (each resend
    that was refused again counts again); ``unanswered`` the calls left
    without an answer once the retry budget was spent. Neither is an error.
    """

    latencies: dict[str, list[list[float]]] = field(default_factory=dict)
    outputs: dict[str, list[Optional[Mapping[str, np.ndarray]]]] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    refusals: dict[str, int] = field(default_factory=dict)
    unanswered: dict[str, int] = field(default_factory=dict)
    retry_budget: int = 0


@dataclass(frozen=True)
class Report:
    model: str
    verdict: str
    checks: tuple[Check, ...]
    outputs: Mapping[str, Mapping[str, codec.JSON]]  # per output, the numbers behind its check (and its kind)
    latency: Mapping[str, codec.JSON]
    errors: Mapping[str, codec.JSON]
    sides: Mapping[str, str] = field(default_factory=dict)  # side -> what it is, e.g. "label canary, version 2"
    mode: str = ""  # how the outputs were judged: retrain or elementwise, and why

    def to_json(self) -> dict[str, codec.JSON]:
        return {"model": self.model, "verdict": self.verdict, "sides": dict(self.sides), "mode": self.mode,
                "checks": [asdict(c) for c in self.checks],
                "outputs": {name: dict(numbers) for name, numbers in self.outputs.items()},
                "latency": dict(self.latency), "errors": dict(self.errors)}

    def table(self) -> str:
        rows = [("check", "verdict", "value", "threshold", "detail")]
        rows += [(c.name, c.verdict, _fmt(c.value), _fmt(c.threshold), c.detail) for c in self.checks]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = ["  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows]
        why = [f"  {c.verdict} {c.name}: {c.detail}" for c in self.checks if c.verdict == self.verdict != PASS]
        head = [f"{self.model}: {' vs '.join(f'{side} ({what})' for side, what in self.sides.items())}"
                + (f"; outputs judged: {self.mode}" if self.mode else "")] if self.sides else []
        return "\n".join([*head, *lines, f"{self.model}: {self.verdict}" + (" because" if why else ""), *why])


def _fmt(value: codec.JSON) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def compared_versions(model: str, labels: Mapping[str, int], canary_target: Optional[str] = None
                      ) -> tuple[int, Optional[int], dict[str, str]]:
    """``(stable version, canary version, what each side is)`` from the model's labels; the canary's version
    is None when it is served elsewhere (``canary_target``, unlabeled). :class:`SameVersion` when both labels
    name one version."""
    stable = labels["stable"]
    canary = None if canary_target else labels.get("canary", stable)
    if canary == stable:
        raise SameVersion(f"{model}: labels stable and canary both name version {stable}: nothing to compare "
                          f"(canary a new version first: python -m serving.rollout canary {model} VERSION)")
    return stable, canary, {"stable": f"label stable, version {stable}",
                            "canary": f"label canary, version {canary}" if canary is not None
                            else f"unlabeled at {canary_target}"}


def output_context(manifest: Optional[Manifest], signature: str, stable_dir: Optional[Path],
                   canary_dir: Optional[Path]) -> verdict.Context:
    """What the verdict knows besides the answers: the stable manifest's class output, method and tolerance
    for ``signature``, and whether the two version directories hold the same weights."""
    same, why = verdict.same_weights(stable_dir, canary_dir)
    spec = manifest.signatures.get(signature) if manifest else None
    top1 = manifest.top1_outputs.get(signature) if manifest else None
    return verdict.Context(top1_outputs=(top1,) if top1 else (), method_name=spec.method_name if spec else None,
                           tolerance=manifest.tolerance if manifest else {}, same_weights=same, why=why)


# --- replay and verdict ---------------------------------------------------------------------------

class _Pacer:
    """The gap between call starts (:class:`Pacing`), and the retry budget left."""

    def __init__(self, pacing: Pacing, clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
        self.pacing, self.clock, self.sleep = pacing, clock, sleep
        self.floor = 1.0 / pacing.max_rate if pacing.max_rate else 0.0
        self.gap, self.budget = self.floor, pacing.retry_budget
        self.last_start: Optional[float] = None

    def wait_turn(self) -> None:
        if self.last_start is not None and self.gap > 0:
            delay = self.last_start + self.gap - self.clock()
            if delay > 0:
                self.sleep(delay)
        self.last_start = self.clock()

    def answered(self) -> None:
        self.gap = max(self.floor, self.gap * self.pacing.recovery)

    def refused(self) -> bool:
        """A refusal: slow down; True when the call may be resent (the budget is not spent)."""
        self.gap = min(self.pacing.max_backoff, max(self.floor, self.pacing.initial_backoff, self.gap * 2))
        if self.budget <= 0:
            return False
        self.budget -= 1
        return True


def replay(sides: Sequence[Side], batches: Sequence[Mapping[str, np.ndarray]], rounds: int = 5,
           clock: Callable[[], float] = time.perf_counter, *, pacing: Pacing = Pacing(),
           sleep: Callable[[float], None] = time.sleep) -> Replay:
    """Every batch to every side, ``rounds`` times; the side that goes first alternates per batch.

    Calls are paced by ``pacing``; a latency is that of the answered attempt only. One call per side
    before the first round is not recorded (it opens the connection: a TLS handshake is no version's latency).
    """
    names = [s.name for s in sides]
    out = Replay({n: [] for n in names}, {n: [] for n in names}, {n: [] for n in names}, dict.fromkeys(names, 0),
                 dict.fromkeys(names, 0), dict.fromkeys(names, 0), pacing.retry_budget)
    pacer = _Pacer(pacing, clock, sleep)
    if batches:
        for s in sides:
            _warm(s, batches[0], pacer)
    for round_index in range(rounds):
        for s in sides:
            out.latencies[s.name].append([])
        for i, batch in enumerate(batches):
            order = sides if (i + round_index) % 2 == 0 else list(reversed(sides))
            for s in order:
                out.requests[s.name] += 1
                answer = _call(s, batch, out, pacer)
                if round_index == 0:
                    out.outputs[s.name].append(answer)
    return out


def _warm(side: Side, batch: Mapping[str, np.ndarray], pacer: _Pacer) -> None:
    """One unrecorded call on ``side`` (resent on the limiter's refusals while the budget lasts)."""
    while True:
        pacer.wait_turn()
        try:
            side.predict(batch)
        except status.ServingError as exc:
            if is_gateway_refusal(exc.details) and pacer.refused():
                continue
        return


def _call(side: Side, batch: Mapping[str, np.ndarray], out: Replay, pacer: _Pacer
          ) -> Optional[Mapping[str, np.ndarray]]:
    """One call on ``side``, resent while the gateway refuses it and the budget lasts; None if unanswered."""
    while True:
        pacer.wait_turn()
        start = pacer.clock()
        try:
            answer = side.predict(batch)
        except status.ServingError as exc:
            if is_gateway_refusal(exc.details):
                out.refusals[side.name] += 1
                if pacer.refused():
                    continue
                out.unanswered[side.name] += 1
                return None
            out.errors[side.name].append(str(exc))
            return None
        out.latencies[side.name][-1].append(pacer.clock() - start)
        pacer.answered()
        return answer


def _latency_checks(replayed: Replay, thresholds: Thresholds) -> tuple[list[Check], dict[str, codec.JSON]]:
    stable, canary = replayed.latencies["stable"], replayed.latencies["canary"]
    checks: list[Check] = []
    numbers: dict[str, codec.JSON] = {}
    for pct, limit in ((50, thresholds.max_p50_ratio), (99, thresholds.max_p99_ratio)):
        ratios = [float(np.percentile(c, pct) / np.percentile(s, pct)) for s, c in zip(stable, canary) if s and c]
        if not ratios:
            checks.append(Check(f"latency:p{pct}", INCONCLUSIVE, None, limit, "no round answered on both sides"))
            continue
        median = float(np.median(ratios))
        verdict = FAIL if min(ratios) > limit else PASS if median <= limit else INCONCLUSIVE
        s_ms = float(np.percentile([x for s in stable for x in s], pct) * 1e3)
        c_ms = float(np.percentile([x for c in canary for x in c], pct) * 1e3)
        numbers[f"p{pct}"] = {"ratio": median, "ratio_min": min(ratios), "ratio_max": max(ratios),
                              "stable_ms": s_ms, "canary_ms": c_ms, "rounds": len(ratios)}
        checks.append(Check(f"latency:p{pct}", verdict, median, limit,
                            f"{c_ms:.2f} ms vs {s_ms:.2f} ms; rounds {min(ratios):.2f}..{max(ratios):.2f}"))
    return checks, numbers


def _error_check(replayed: Replay, thresholds: Thresholds, extra: Optional[Mapping[str, Mapping[str, float]]] = None
                 ) -> tuple[list[Check], dict[str, codec.JSON]]:
    refusals, unanswered = replayed.refusals or {}, replayed.unanswered or {}
    # A call the gateway never let through is no evidence either way: it is out of the rate's denominator.
    judged = {side: replayed.requests[side] - unanswered.get(side, 0) for side in replayed.requests}
    rates = {side: len(replayed.errors[side]) / max(judged[side], 1) for side in replayed.requests}
    numbers: dict[str, codec.JSON] = {
        side: {"requests": replayed.requests[side], "errors": len(replayed.errors[side]), "rate": rates[side],
               "first": [*replayed.errors[side][:1]], "gateway_refusals": refusals.get(side, 0),
               "unanswered": unanswered.get(side, 0)} for side in replayed.requests}
    checks = [_rate_check("errors", rates["stable"], rates["canary"], thresholds)]
    gateway = _gateway_check(replayed)
    if gateway is not None:
        checks.append(gateway)
    for source, by_label in (extra or {}).items():
        numbers[source] = {**by_label}
        if by_label.get("canary_requests", 0):
            # Without stable traffic in the window (weight 100), the canary is held to a baseline of 0.
            checks.append(_rate_check(source, by_label["stable_rate"], by_label["canary_rate"], thresholds,
                                      f"{by_label['canary_requests']:g} canary / {by_label['stable_requests']:g} "
                                      "stable requests"))
        else:
            checks.append(Check(source, PASS, None, thresholds.max_error_rate, "no canary traffic seen: not judged"))
    return checks, numbers


def _gateway_check(replayed: Replay) -> Optional[Check]:
    """The gateway limiter's refusals: PASS while each was resent and answered, INCONCLUSIVE past the budget."""
    refused = sum((replayed.refusals or {}).values())
    if not refused:
        return None
    left = sum((replayed.unanswered or {}).values())
    per_side = ", ".join(f"{side} {n}" for side, n in sorted((replayed.refusals or {}).items()))
    if not left:
        return Check("gateway", PASS, refused, replayed.retry_budget,
                     f"the gateway's limiter refused {refused} calls ({per_side}); each was resent and answered")
    return Check("gateway", INCONCLUSIVE, refused, replayed.retry_budget,
                 f"the gateway's limiter refused {refused} calls ({per_side}) and the retry budget of "
                 f"{replayed.retry_budget} was spent: {left} calls went unanswered, so the limiter, not the canary, "
                 "decided this run (use the loadtest credential, raise GATEWAY_LOADTEST_RATE, or pass --max-rate)")


def _rate_check(name: str, stable: float, canary: float, thresholds: Thresholds, detail: str = "") -> Check:
    if stable > thresholds.max_error_rate:
        return Check(name, INCONCLUSIVE, canary, thresholds.max_error_rate,
                     f"stable fails too ({stable:.1%}): no baseline")
    verdict = FAIL if canary - stable > thresholds.max_error_rate else PASS
    return Check(name, verdict, canary, thresholds.max_error_rate, detail or f"stable {stable:.1%}")


def analyze(model: str, replayed: Replay, thresholds: Thresholds = Thresholds(), *,
            tolerance: Mapping[str, float] = {}, top1: Optional[str] = None,
            gateway_errors: Optional[Mapping[str, Mapping[str, float]]] = None,
            context: Optional[verdict.Context] = None, sides: Mapping[str, str] = {}) -> Report:
    """The checks and verdict of a :func:`replay` between sides ``stable`` and ``canary``.

    ``context`` (the manifest's class outputs and tolerance, whether the versions hold the same weights)
    feeds :func:`serving.rollout.verdict.judge_outputs`; without it, ``tolerance`` and ``top1`` make one.
    ``sides`` names what each side is (its label and version), for the table.
    """
    if context is None:
        context = verdict.Context(top1_outputs=(top1,) if top1 else (), tolerance=tolerance)
    rules = thresholds.rules(top1)
    output_checks, outputs = verdict.judge_outputs(replayed.outputs["stable"], replayed.outputs["canary"], rules,
                                                   context)
    latency_checks, latency = _latency_checks(replayed, thresholds)
    error_checks, errors = _error_check(replayed, thresholds, gateway_errors)
    checks = [*output_checks, *latency_checks, *error_checks]
    answered = min(sum(len(r) for r in replayed.latencies[side]) for side in ("stable", "canary"))
    if answered < thresholds.min_requests and not any(c.verdict == FAIL for c in checks):
        checks.append(Check("requests", INCONCLUSIVE, answered, thresholds.min_requests, "too few answers compared"))
    if rules.mode == "auto":
        mode = f"{'elementwise' if context.same_weights else 'retrain'} ({context.why or 'weights not compared'})"
    else:
        mode = f"{rules.mode} (asked)"
    return Report(model, worst(c.verdict for c in checks), tuple(checks), outputs, latency, errors, dict(sides), mode)


def gateway_error_rates(lines: Iterable[str], model: str) -> dict[str, float]:
    """Per label, requests and error rate of ``model``'s REST calls in the gateway's JSON access log.

    The label is ``route_label`` (set by the canary routes) or the ``/labels/<name>`` of the path;
    an error is a 5xx status (TF Serving's or the gateway's own).
    """
    counts = {"stable": [0, 0], "canary": [0, 0]}
    prefix = f"/v1/models/{model}"
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        uri = str(entry.get("uri", ""))
        if not uri.startswith(prefix):
            continue
        label = entry.get("route_label") or (uri[len(prefix):].split("/labels/", 1)[1].split(":")[0].split("/")[0]
                                             if "/labels/" in uri else "")
        if label in counts:
            counts[label][0] += 1
            counts[label][1] += int(int(entry.get("status", 0)) >= 500)
    return {f"{label}_{key}": value for label, (n, bad) in counts.items()
            for key, value in (("requests", n), ("rate", bad / n if n else 0.0))}
