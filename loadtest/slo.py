"""SLO gates: p99 latency, failure ratio and minimum throughput, checked against a run's summary."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Optional


__all__ = ["Gates", "GateResult", "evaluate", "load_gates"]


@dataclass(frozen=True)
class Gates:
    """Limits a run must meet; ``None`` leaves a gate open.

    ``p99_ms``: the 99th-percentile response time must be at most this;
    ``max_failure_ratio``: failures / requests at most this;
    ``min_rps``: requests per second at least this.
    """

    p99_ms: Optional[float] = None
    max_failure_ratio: Optional[float] = None
    min_rps: Optional[float] = None

    def merged(self, other: "Gates") -> "Gates":
        """These gates with every gate that ``other`` sets taking precedence."""
        values = {f.name: getattr(other, f.name) if getattr(other, f.name) is not None else getattr(self, f.name)
                  for f in fields(self)}
        return Gates(**values)

    def as_dict(self) -> dict[str, Optional[float]]:
        return asdict(self)


@dataclass(frozen=True)
class GateResult:
    """One gate's verdict, with the measured value next to the limit."""

    gate: str
    limit: float
    measured: float
    passed: bool

    def __str__(self) -> str:
        verdict = "ok" if self.passed else "BROKEN"
        op = ">=" if self.gate == "min_rps" else "<="
        return f"SLO gate {self.gate}: measured {self.measured:.4g}, required {op} {self.limit:.4g} -> {verdict}"


def load_gates(path: Path) -> Gates:
    """Gates from a JSON file such as ``{"p99_ms": 50, "max_failure_ratio": 0.001, "min_rps": 100}``."""
    data = json.loads(Path(path).read_text())
    known = {f.name for f in fields(Gates)}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown SLO gates in {path}: {sorted(unknown)}; known: {sorted(known)}")
    return Gates(**{k: float(v) for k, v in data.items() if v is not None})


def evaluate(gates: Gates, summary: Mapping[str, Any]) -> list[GateResult]:   # a run summary, as read
    """Check ``summary`` (keys ``p99_ms``, ``failure_ratio``, ``rps``) against every set gate."""
    results = []
    if gates.p99_ms is not None:
        measured = float(summary["p99_ms"])
        results.append(GateResult("p99_ms", gates.p99_ms, measured, measured <= gates.p99_ms))
    if gates.max_failure_ratio is not None:
        measured = float(summary["failure_ratio"])
        results.append(GateResult("max_failure_ratio", gates.max_failure_ratio, measured,
                                  measured <= gates.max_failure_ratio))
    if gates.min_rps is not None:
        measured = float(summary["rps"])
        results.append(GateResult("min_rps", gates.min_rps, measured, measured >= gates.min_rps))
    return results
