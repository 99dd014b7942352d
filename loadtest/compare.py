"""``python -m loadtest compare BASELINE.json CANDIDATE.json``: a regression gate, level by level.

The seed's advice, "re-run stress tests after every TensorFlow upgrade", as a
command: sweep on the old pin, change the pin, sweep again, compare. Exit 0
when no gated metric got worse beyond the allowed regression and the measured
spread, 1 on a regression, 2 when the files cannot be compared.

**What it reads.** Every input is read as *series* of *levels*:

- ``sweep.json`` (``python -m loadtest sweep``): each series is one curve
  (``digits/grpc/batching-on``), each level one concurrency or request rate;
  the level's windows (``window_rps``, ``window_p50_ms``) give its spread;
- ``tune.json`` (``python -m loadtest tune``): series ``MODEL/PROTOCOL/default``
  and ``MODEL/PROTOCOL/tuned`` from the final paired rounds, each level with
  its ``rounds``;
- anything else in the generic shape, e.g. a benchmark's ``--json`` output::

    {"series": [{"label": "digits/grpc/batching-on",
                 "levels": [{"level": 8, "throughput_rps": 812.0, "p50_ms": 9.1, "p99_ms": 20.3,
                             "rounds": [{"throughput_rps": 800.0, "p50_ms": 9.0}, ...]}]}]}

  ``level`` is a number or a string (matched as given); every metric is
  optional; ``rounds`` (optional) are repeated measurements of the level,
  which give its spread and its mean.

**The verdict.** Series are matched by label and levels by value. For each
gated metric (``--metrics``, default throughput and p50), the candidate's
change is taken against the baseline (positive = worse: less throughput, more
latency). Each side's spread is half the range of its samples over their mean
(rounds, else the sweep's windows; 0 with one sample); the noise band is the
two combined (root of the sum of squares). A level regresses when it is worse
by more than ``--max-regression`` AND by more than the noise band; better by
as much is an improvement; anything else is within noise.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional, Sequence, Union

if TYPE_CHECKING:
    from serving.codec import JSON


__all__ = [
    "METRICS",
    "Level",
    "Samples",
    "Verdict",
    "load_result",
    "compare_results",
    "parse_fraction",
    "format_verdicts",
    "add_arguments",
    "run_compare",
]

# metric → (higher is better, short name)
METRICS: dict[str, tuple[bool, str]] = {"throughput_rps": (True, "throughput"), "p50_ms": (False, "p50"),
                                        "p99_ms": (False, "p99")}
_SHORT = {short: name for name, (_, short) in METRICS.items()}
_WINDOWS = {"throughput_rps": "window_rps", "p50_ms": "window_p50_ms"}
EXIT_OK, EXIT_REGRESSION, EXIT_UNUSABLE = 0, 1, 2

Level = Union[float, str]
"""A level's ``level``: a number, or a string matched as given."""


class CompareError(ValueError):
    """A file that is not a result, or two results with nothing in common."""


@dataclass(frozen=True)
class Samples:
    """One metric of one level: its value (mean of the samples) and its relative spread."""

    value: float
    samples: tuple[float, ...]
    source: str  # "rounds", "windows" or "single"

    @property
    def relative_spread(self) -> float:
        if len(self.samples) < 2 or not self.value:
            return 0.0
        return (max(self.samples) - min(self.samples)) / 2 / abs(self.value)


@dataclass(frozen=True)
class Verdict:
    """One gated metric at one level of one series."""

    series: str
    level: Level
    metric: str
    baseline: Samples
    candidate: Samples
    worse_by: float       # relative; positive = worse
    band: float           # relative noise band
    threshold: float      # max(--max-regression, band)
    verdict: str          # "regression", "improvement", "within noise"


def parse_fraction(text: str) -> float:
    """``5%``, ``5`` (percent) or ``0.05``: the fraction 0.05."""
    text = str(text).strip()
    value = float(text.rstrip("%"))
    return value / 100 if text.endswith("%") or value >= 1 else value


def _number(value: JSON, key: str) -> float:
    """A metric's value: a number (or a number's text, as float() reads it); CompareError naming ``key``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise CompareError(f"{key} is a number, not {value!r}")


def _numbers(value: JSON, key: str) -> list[JSON]:
    """A list of a level (``rounds``, a sweep's windows); absent or empty: none."""
    if not value:
        return []
    if not isinstance(value, list):
        raise CompareError(f"{key} is a list, not {value!r}")
    return value


def _level_samples(level: Mapping[str, JSON], metric: str) -> Optional[Samples]:
    rounds = [_number(v, f"rounds: {metric}") for r in _numbers(level.get("rounds"), "rounds")
              if isinstance(r, Mapping) and (v := r.get(metric)) is not None]
    if rounds:
        return Samples(sum(rounds) / len(rounds), tuple(rounds), "rounds")
    value = level.get(metric)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    window_key = _WINDOWS.get(metric, "")
    windows = tuple(_number(v, window_key) for v in _numbers(level.get(window_key), window_key))
    number = _number(value, metric)
    return Samples(number, windows or (number,), "windows" if windows else "single")


def _level_key(level: JSON) -> Level:
    if isinstance(level, (int, float, str)) and not isinstance(level, bool):
        return level
    raise CompareError(f"\"level\" is a number or a string, not {level!r}")


def load_result(path: Path) -> dict[str, dict[Level, dict[str, Samples]]]:
    """``{series label: {level: {metric: Samples}}}`` from a sweep, tune or generic JSON file; CompareError
    naming the series and level where a value has the wrong type."""
    try:
        doc: JSON = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise CompareError(f"{path}: cannot read a JSON result: {error}") from None
    series = doc.get("series") if isinstance(doc, dict) else None
    if not isinstance(series, list):
        raise CompareError(f"{path}: no \"series\" list: not the output of sweep, tune or a benchmark's --json "
                           "(see python -m loadtest compare --help for the shape)")
    result: dict[str, dict[Level, dict[str, Samples]]] = {}
    for entry in series:
        label = entry.get("label") if isinstance(entry, dict) else None
        entry_levels = entry.get("levels") if isinstance(entry, dict) else None
        if not label or not isinstance(entry_levels, list):
            raise CompareError(f"{path}: every series needs a \"label\" and a \"levels\" list")
        levels = result.setdefault(str(label), {})
        for level in entry_levels:
            if not isinstance(level, dict) or "level" not in level:
                raise CompareError(f"{path}: series {label}: a level without \"level\"")
            try:
                key = _level_key(level["level"])
                levels[key] = {m: s for m in METRICS if (s := _level_samples(level, m)) is not None}
            except CompareError as error:
                raise CompareError(f"{path}: series {label}, level {level['level']!r}: {error}") from None
    return result


def _judge(series: str, level: Level, metric: str, base: Samples, cand: Samples, max_regression: float) -> Verdict:
    higher_is_better = METRICS[metric][0]
    change = (cand.value - base.value) / base.value if base.value else 0.0
    worse_by = -change if higher_is_better else change
    band = math.hypot(base.relative_spread, cand.relative_spread)
    threshold = max(max_regression, band)
    verdict = "regression" if worse_by > threshold else "improvement" if -worse_by > threshold else "within noise"
    return Verdict(series, level, metric, base, cand, worse_by, band, threshold, verdict)


def compare_results(baseline: Mapping[str, Mapping[Level, Mapping[str, Samples]]],
                    candidate: Mapping[str, Mapping[Level, Mapping[str, Samples]]], *,
                    metrics: Sequence[str] = ("throughput_rps", "p50_ms"),
                    max_regression: float = 0.05) -> list[Verdict]:
    """A verdict for every gated metric at every level both results measured (series matched by label)."""
    verdicts = []
    for label in baseline:
        if label not in candidate:
            continue
        for level, base_metrics in baseline[label].items():
            cand_metrics = candidate[label].get(level)
            if cand_metrics is None:
                continue
            for metric in metrics:
                if metric in base_metrics and metric in cand_metrics:
                    verdicts.append(_judge(label, level, metric, base_metrics[metric], cand_metrics[metric],
                                           max_regression))
    return verdicts


def format_verdicts(verdicts: Sequence[Verdict]) -> str:
    """The table ``compare`` prints: one line per series, level and metric."""
    lines = [f"{'series':<34} {'level':>6} {'metric':<10} {'baseline':>10} {'candidate':>10} {'change':>8} "
             f"{'noise':>7} {'limit':>7}  verdict"]
    for v in verdicts:
        higher = METRICS[v.metric][0]
        change = -v.worse_by if higher else v.worse_by
        lines.append(f"{v.series:<34} {str(v.level):>6} {METRICS[v.metric][1]:<10} {v.baseline.value:>10.2f} "
                     f"{v.candidate.value:>10.2f} {100 * change:>+7.1f}% {100 * v.band:>6.1f}% "
                     f"{100 * v.threshold:>6.1f}%  {v.verdict.upper() if v.verdict == 'regression' else v.verdict}"
                     f"  [{v.baseline.source}/{v.candidate.source}]")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``compare`` subcommand's flags."""
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("baseline", type=Path, help="the result to hold to (e.g. the sweep on the old pin)")
    parser.add_argument("candidate", type=Path, help="the result under test (e.g. the sweep on the new pin)")
    parser.add_argument("--max-regression", type=parse_fraction, default=0.05,
                        help="loss allowed on top of the measured noise, e.g. 5%% or 0.05 (default 5%%)")
    parser.add_argument("--metrics", default="throughput,p50",
                        help="gated metrics: any of throughput,p50,p99 (default throughput,p50)")
    parser.set_defaults(func=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    """The ``compare`` subcommand: print every verdict, exit 1 on a regression, 2 when nothing compares."""
    try:
        metrics = [_SHORT[m.strip()] for m in args.metrics.split(",") if m.strip()]
    except KeyError as error:
        print(f"python -m loadtest compare: error: unknown metric {error.args[0]!r}; use throughput, p50, p99",
              file=sys.stderr)
        return EXIT_UNUSABLE
    try:
        baseline, candidate = load_result(args.baseline), load_result(args.candidate)
    except CompareError as error:
        print(f"python -m loadtest compare: error: {error}", file=sys.stderr)
        return EXIT_UNUSABLE
    verdicts = compare_results(baseline, candidate, metrics=metrics, max_regression=args.max_regression)
    if not verdicts:
        print(f"python -m loadtest compare: error: no series and level in common: baseline has "
              f"{', '.join(baseline) or 'none'}; candidate has {', '.join(candidate) or 'none'}", file=sys.stderr)
        return EXIT_UNUSABLE
    print(format_verdicts(verdicts))
    only = sorted(set(baseline) ^ set(candidate))
    if only:
        print(f"not compared (in one file only): {', '.join(only)}")
    regressions = [v for v in verdicts if v.verdict == "regression"]
    if regressions:
        print(f"REGRESSION: {len(regressions)} of {len(verdicts)} checks worse than the allowed "
              f"{100 * args.max_regression:.0f} % and the measured noise")
        return EXIT_REGRESSION
    print(f"PASS: {len(verdicts)} checks within {100 * args.max_regression:.0f} % or the measured noise")
    return EXIT_OK
