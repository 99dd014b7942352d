"""Progressive delivery: canary, analyze, step the weight, analyze again; promote, or roll back at the first FAIL.

:func:`run_auto` is the decision loop; the CLI (``python -m serving.rollout
auto MODEL VERSION --steps 10,50,100``) hands it the moves (the same label
moves as ``canary`` / ``promote`` / ``rollback``), the traffic routes
(``serving.rollout.traffic``: the compose gateway, a host nginx, Kubernetes
routes) and one analysis (``serving.rollout.analyze``) to run per decision,
with the gateway's error rates per label since the step began when an access
log is at hand. Every decision is printed with its numbers and kept in the
JSON report.

An INCONCLUSIVE analysis is run once more; still INCONCLUSIVE, the rollout
stops and rolls back (nothing proved the canary good), with exit code 2.
"""
from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Protocol, Sequence

from serving.rollout.analyze import EXIT_CODES, INCONCLUSIVE, PASS, Report, gateway_error_rates
from serving.rollout.traffic import ComposeGateway, TrafficRoutes

if TYPE_CHECKING:
    from serving.codec import JSON

__all__ = ["AccessLog", "FileAccessLog", "ComposeAccessLog", "Decision", "run_auto"]


class AccessLog(Protocol):
    """The gateway's JSON access log from a mark on."""

    def mark(self) -> None: ...

    def since_mark(self) -> list[str]: ...


class FileAccessLog:
    """A file nginx appends its access log to (the tests' gateway)."""

    def __init__(self, path: Path) -> None:
        self.path, self._offset = Path(path), 0

    def mark(self) -> None:
        self._offset = self.path.stat().st_size if self.path.exists() else 0

    def since_mark(self) -> list[str]:
        with open(self.path, "rb") as log:
            log.seek(self._offset)
            return log.read().decode(errors="replace").splitlines()


class ComposeAccessLog:
    """The compose gateway's stdout (``docker logs --since``)."""

    def __init__(self, gateway: ComposeGateway, run: Callable[..., subprocess.CompletedProcess] = subprocess.run):
        self.gateway, self._since, self._run = gateway, 0.0, run

    def mark(self) -> None:
        self._since = time.time()

    def since_mark(self) -> list[str]:
        out = self._run([self.gateway.docker, "logs", "--since", f"{self._since:.3f}", self.gateway.container()],
                        capture_output=True, text=True, timeout=120)
        return out.stdout.splitlines()


@dataclass
class Decision:
    step: str
    weight: float
    verdict: str
    action: str
    report: Mapping[str, JSON] = field(default_factory=dict)

    def line(self) -> str:
        checks = "; ".join(f"{c['name']} {c['verdict']} {_short(c['value'])}" for c in _checks(self.report))
        why = "; ".join(f"{c['name']}: {c['detail']}" for c in _checks(self.report)
                        if c["verdict"] == self.verdict != PASS and c.get("detail"))
        return (f"[{self.step}] weight {self.weight:g}%: {self.verdict} -> {self.action}" + (f" ({checks})" if checks else "")
                + (f"\n  because {why}" if why else ""))


def _checks(report: Mapping[str, JSON]) -> list[dict[str, JSON]]:
    """The checks of an analysis report document (:meth:`Report.to_json`: one object of Check's fields each)."""
    checks = report.get("checks", [])
    return [c for c in checks if isinstance(c, dict)] if isinstance(checks, list) else []


def _short(value: JSON) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def run_auto(model: str, version: int, steps: Sequence[float], *, canary: Callable[[], None],
             promote: Callable[[], None], rollback: Callable[[], None], routes: TrafficRoutes,
             analyze_once: Callable[[Optional[Mapping[str, Mapping[str, float]]]], Report],
             access_log: Optional[AccessLog] = None, wait_s: float = 0.0, retries: int = 1,
             echo: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep,
             report_path: Optional[Path] = None, shadow_phase: Optional[Callable[[], Report]] = None,
             shadow_percent: float = 100.0) -> tuple[int, dict[str, JSON]]:
    """Run the rollout; (exit code: 0 promoted, 1 rolled back on FAIL, 2 rolled back INCONCLUSIVE, the report).

    ``shadow_phase`` (a live analysis, ``serving.rollout.shadow``): first the canary is shadowed
    (``shadow_percent`` of the unlabeled traffic mirrored to it) and judged on that; the shadow ends before
    the next step, and anything but PASS rolls back (whose route removal ends the shadow)."""
    decisions: list[Decision] = []
    decided: list[JSON] = []  # the report's "decisions"
    doc: dict[str, JSON] = {"model": model, "version": version, "steps": list(steps), "decisions": decided}

    def decide(step: str, weight: float, last: bool = False,
               analysis: Optional[Callable[..., Report]] = None) -> str:
        gateway = None
        for _attempt in range(retries + 1):
            if access_log is not None and weight > 0:
                gateway = {"gateway_errors": gateway_error_rates(access_log.since_mark(), model)}
            report = (analysis or analyze_once)(gateway)
            if report.verdict != INCONCLUSIVE:
                break
        action = ("promote" if report.verdict == PASS and last else
                  "next step" if report.verdict == PASS else "roll back")
        decision = Decision(step, weight, report.verdict, action, report.to_json())
        decisions.append(decision)
        decided.append({"step": step, "weight": weight, "verdict": report.verdict, "action": action,
                        "analysis": report.to_json()})
        echo(decision.line())
        return report.verdict

    echo(f"{model}: loading version {version} as canary ({routes.describe()}: weight 0)")
    canary()
    verdict = PASS
    if shadow_phase is not None:
        routes.set_weight(model, 0, shadow=shadow_percent)
        echo(f"{model}: shadow: {shadow_percent:g}% of unlabeled traffic mirrored to canary, analyzed live")
        verdict = decide("shadow", 0, analysis=lambda _gateway: shadow_phase())
        if verdict == PASS:
            routes.set_weight(model, 0)  # the shadow ends: the steps move real traffic
    if verdict == PASS:
        verdict = decide("before traffic", 0, last=not steps)  # no steps (no gateway): this analysis decides
    if verdict == PASS:
        for index, weight in enumerate(steps):
            routes.set_weight(model, weight)
            if access_log is not None:
                access_log.mark()
            if wait_s > 0:
                echo(f"{model}: canary at {weight:g}%, waiting {wait_s:g} s")
                sleep(wait_s)
            verdict = decide(f"step {weight:g}%", weight, last=index == len(steps) - 1)
            if verdict != PASS:
                break
    if verdict == PASS:
        promote()
        doc["outcome"] = "promoted"
    else:
        rollback()
        doc["outcome"] = "rolled back"
    echo(f"{model}: version {version} {doc['outcome']}")
    if report_path is not None:
        Path(report_path).write_text(json.dumps(doc, indent=2, default=str) + "\n")
        echo(f"report: {report_path}")
    return EXIT_CODES[verdict if verdict != PASS else PASS], doc

