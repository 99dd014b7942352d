"""What the monitoring ships, read as data: PromQL expressions and the names they use.

Every expression of every dashboard panel, template variable and rule is
collected with where it came from, so a failing test names the panel. The
metric-name extraction is a small lexer, not a PromQL parser: string literals,
label matchers, ranges and grouping clauses are blanked, then every remaining
identifier that is not a function call or a keyword is a metric name.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterator

import yaml

from serving.checkout import REPO_ROOT


__all__ = [
    "MONITORING", "DASHBOARDS_DIR", "RULES_DIR", "PROMTOOL_TESTS_DIR", "RUNBOOK",
    "Expr", "dashboards", "panels", "dashboard_exprs", "rule_exprs", "rules", "alert_rules",
    "recorded_names", "metric_names", "selectors", "grouping_labels", "substitute",
    "label_values_query",
]

MONITORING = REPO_ROOT / "monitoring"
DASHBOARDS_DIR = MONITORING / "grafana" / "dashboards"
RULES_DIR = MONITORING / "prometheus" / "rules"
PROMTOOL_TESTS_DIR = MONITORING / "prometheus" / "tests"
RUNBOOK = MONITORING / "runbooks" / "tfserving.md"

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
             "unless", "offset", "inf", "nan", "atan2", "start", "end"}
_IDENT = re.compile(r"(?<![\w.:$])([a-zA-Z_:][a-zA-Z0-9_:]*)")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}")
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|`[^`]*`|\'[^\']*\')\s*,?')


@dataclass(frozen=True)
class Expr:
    """One PromQL expression and where it lives (``overview: panel 'Title' target A``)."""

    where: str
    expr: str
    gpu: bool = False   # reads DCGM metrics only; no DCGM exporter runs here


def dashboards() -> dict[str, dict]:
    """Every dashboard JSON by file name."""
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS_DIR.glob("*.json"))}


def panels(dashboard: dict) -> Iterator[dict]:
    """Every panel, rows' nested panels included."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def dashboard_exprs() -> list[Expr]:
    """Panel targets and template-variable queries of every dashboard."""
    found = []
    for name, board in dashboards().items():
        for panel in panels(board):
            for target in panel.get("targets", []):
                expr = target.get("expr", "")
                where = f"{name}: panel {panel.get('title')!r} target {target.get('refId')}"
                found.append(Expr(where, expr, gpu="DCGM_" in expr))
        for var in board.get("templating", {}).get("list", []):
            if var.get("type") == "query":
                query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
                found.append(Expr(f"{name}: variable ${var['name']}", query))
    return found


def rules() -> list[dict]:
    """Every rule of every rule file, each with its file and group added."""
    found = []
    for path in sorted(RULES_DIR.glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                found.append({**rule, "_file": path.name, "_group": group["name"]})
    return found


def alert_rules() -> list[dict]:
    return [rule for rule in rules() if "alert" in rule]


def rule_exprs() -> list[Expr]:
    found = []
    for rule in rules():
        name = rule.get("record") or rule.get("alert")
        labels = rule.get("labels", {}) if "record" in rule else {}
        where = f"{rule['_file']}: {name}{labels or ''}"
        found.append(Expr(where, rule["expr"], gpu="DCGM_" in rule["expr"]))
    return found


def recorded_names() -> set[str]:
    return {rule["record"] for rule in rules() if "record" in rule}


def _blank_strings(expr: str) -> str:
    return _STRING.sub('""', expr)


def metric_names(expr: str) -> set[str]:
    """Metric names an expression reads (histogram suffixes kept)."""
    variable_query = label_values_query(expr)         # Grafana's label_values(expr, label)
    text = _blank_strings(variable_query[0] if variable_query else expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        name = match.group(1)
        rest = text[match.end():].lstrip()
        if rest.startswith("(") or name in _KEYWORDS:
            continue
        names.add(name)
    return names


def selectors(expr: str) -> list[tuple[str, list[str]]]:
    """``(metric name, [label names matched])`` for every ``name{...}`` selector."""
    found = []
    for match in _SELECTOR.finditer(expr):
        name, body = match.group(1) or "", match.group(2)
        found.append((name, [m.group(1) for m in _MATCHER.finditer(body)]))
    return found


def grouping_labels(expr: str) -> set[str]:
    """Label names in ``by``/``without``/``on``/``ignoring``/``group_*`` clauses."""
    text = _blank_strings(expr)
    labels = set()
    for _, body in _GROUPING.findall(text):
        labels.update(part.strip() for part in body.split(",") if part.strip())
    # Grafana's label_values(expr, label)
    for match in re.finditer(r"label_values\(.*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)", expr):
        labels.add(match.group(1))
    return labels


def substitute(expr: str, values: dict[str, str]) -> str:
    """Replace Grafana variables (``$name`` and ``${name}``) with concrete values."""
    def repl(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise KeyError(f"no value for ${name} in {expr!r}")
        return values[name]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, expr)


def label_values_query(expr: str) -> tuple[str, str] | None:
    """``(series expr, label)`` for a Grafana ``label_values(expr, label)`` query."""
    match = re.fullmatch(r"\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*", expr, re.S)
    return (match.group(1), match.group(2)) if match else None

