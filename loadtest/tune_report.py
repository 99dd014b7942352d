"""The tuner's report: the seed's table from a ``tune.json`` summary, the combined config, the flags to paste.

:func:`table_rows` and :func:`render_markdown` are pure functions of the
summary ``loadtest.tune`` writes as ``tune.json``, so a report can be rendered
again from the JSON alone (``benchmarks.gpu`` embeds it in the GPU-host
report). :func:`write_report` writes ``tune.md``, ``tune.json``, ``tune.png``,
``tune.csv`` and, when batching is recommended, ``batching.config``.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from google.protobuf import text_format
from google.protobuf.message import Message

from loadtest import space
from loadtest.plots import plot_tune_rows
from serving.model_repo import XLA_SERVING_FLAG, published_name

# The tune summary is read as JSON gives it (Any): its shape is tune.py's, checked by the tests that read it.
__all__ = [
    "table_rows",
    "combined",
    "chosen_config",
    "recommended_flags",
    "batching_text",
    "render_markdown",
    "write_report",
]


def _by_ratio(trial: Mapping[str, Any]) -> float:
    return _score(trial) if not trial.get("error") else -1.0


def _score(trial: Mapping[str, Any]) -> float:
    """The objective's ratio minus its spread over the rounds (what the search compares)."""
    if "score" in trial:
        return trial["score"]
    spread = trial.get("throughput_spread", 0.0) if trial.get("ratio") == trial.get("throughput_ratio") else \
        trial.get("latency_spread", 0.0)
    return trial["ratio"] - spread


def table_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per setting: measured values vs the default (paired rounds), the verdict, or why it was skipped."""
    default, best, cpus = summary["default"], summary["search_best"], summary.get("cpus", 1)
    grid, skipped = summary["grid"], summary.get("skipped", {})
    search = [t for t in summary["trials"] if t["label"] == "search"]
    rows = []
    for dim in space.DIMENSIONS:
        row: dict[str, Any] = {"dimension": dim, "setting": space.SETTING_NAMES[dim],
                               "default": space.describe_value(dim, default[dim], cpus)}
        mine = [t for t in search if t["dimension"] == dim]
        if dim in skipped:
            rows.append({**row, "tuned": "-", "verdict": f"skipped: {skipped[dim]}"})
            continue
        if not mine:
            if dim == "variant":
                reasons = [f"{k.split(':', 1)[1]}: {v}" for k, v in skipped.items() if k.startswith("variant:")]
                rows.append({**row, "tuned": "-", "verdict": "not searched: " + ("; ".join(reasons) or "one value")})
            elif dim in space.BATCHING_KNOBS:
                if best["batching"] == "on" and len(grid[dim]) > 1:
                    rows.append({**row, "tuned": "-", "verdict": "not measured: --max-trials reached"})
            elif len(grid[dim]) > 1:
                rows.append({**row, "tuned": "-", "verdict": "not measured: --max-trials reached"})
            continue
        adopted = best[dim] != default[dim]
        shown = max((t for t in mine if t["config"][dim] == best[dim]), key=_by_ratio) if adopted else \
            max(mine, key=_by_ratio)
        on_top = _on_top(shown["config"], default, dim)
        verdict = "adopted" if adopted else ("error: " + shown["error"] if shown.get("error") else
                                             "not adopted: within noise, or no better than the rows above"
                                             if shown["ratio"] > 1 + summary["min_gain"]
                                             else "no gain: default kept")
        rows.append({**row, "tuned": space.describe_value(dim, shown["config"][dim], cpus), "verdict": verdict,
                     "p50_before_ms": shown.get("baseline_p50_c1_ms"), "p50_after_ms": shown.get("p50_c1_ms"),
                     "throughput_before_rps": shown.get("baseline_rps"), "throughput_after_rps": shown.get("score_rps"),
                     "gain_pct": 100 * (shown["throughput_ratio"] - 1) if shown.get("throughput_ratio") else None,
                     "spread_pct": 100 * shown.get("throughput_spread", 0.0), "rounds": len(shown["rounds"]),
                     "cpu_before_ms": shown.get("baseline_cpu_ms_per_request"),
                     "cpu_after_ms": shown.get("cpu_ms_per_request"),
                     "on_top_of": on_top,
                     "tried": [{"value": space.describe_value(dim, t["config"][dim], cpus),
                                "on_top_of": _on_top(t["config"], default, dim),
                                "throughput_ratio": t["throughput_ratio"], "latency_ratio": t["latency_ratio"],
                                "error": t.get("error")} for t in mine]})
    return rows


def _on_top(config: Mapping[str, space.Setting], default: Mapping[str, space.Setting], dim: str) -> list[str]:
    """The other dimensions ``config`` sets away from the default (``name=value``): what a row was measured on."""
    rest = {k: v for k, v in config.items() if k != dim}
    return [f"{k}={v}" for k, v in rest.items() if v != default.get(k)
            and not (k in space.BATCHING_KNOBS and rest.get("batching") == "off")]


def combined(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The final paired check: the search's winner (or the default against itself) in fresh rounds."""
    final, default = summary["final"], summary["default"]
    is_default = space.normalize(final["config"], default) == space.normalize(default, default)
    holds = not is_default and not final.get("error") and _score(final) > 1 + summary["min_gain"]
    return {"config": final["config"], "is_default": is_default, "holds": holds,
            "baseline_rps": final["baseline_rps"], "tuned_rps": final["score_rps"],
            "gain_pct": 100 * (final["throughput_ratio"] - 1) if final["throughput_ratio"] else None,
            "spread_pct": 100 * final["throughput_spread"], "p50_before_ms": final["baseline_p50_c1_ms"],
            "p50_after_ms": final["p50_c1_ms"], "ratio": final["ratio"],
            "cpu_before_ms": final.get("baseline_cpu_ms_per_request"),
            "cpu_after_ms": final.get("cpu_ms_per_request"), "rounds": final["rounds"],
            "error": final.get("error")}


def chosen_config(summary: Mapping[str, Any]) -> space.Config:
    """The config to deploy: the winner if it held up in the final rounds, else TF Serving's defaults."""
    return dict(summary["final"]["config"]) if combined(summary)["holds"] else dict(summary["default"])


def recommended_flags(summary: Mapping[str, Any], config: Mapping[str, space.Setting],
                      batching_file: str = "/etc/tfserving/batching.config") -> list[str]:
    """The ``tensorflow_model_server`` flags for ``config`` (besides ports and the model config)."""
    flags = [f"--tensorflow_intra_op_parallelism={int(config['intra_op'])}",
             f"--tensorflow_inter_op_parallelism={int(config['inter_op'])}"]
    if config["variant"] == "xla":
        flags.append(XLA_SERVING_FLAG)
    if config["batching"] == "on":
        flags += ["--enable_batching=true", f"--batching_parameters_file={batching_file}"]
    if summary.get("gpu") and config.get("gpu_memory_fraction"):
        flags.append(f"--per_process_gpu_memory_fraction={config['gpu_memory_fraction']:g}")
    return flags


def batching_text(config: Mapping[str, space.Setting], base: Optional[Message]) -> Optional[str]:
    """``batching.config`` (text ``BatchingParameters``) for ``config``; None while batching is off."""
    proto = space.batching_proto(config, base)
    return None if proto is None else text_format.MessageToString(proto)


def _ms(value: Optional[float]) -> str:
    return f"{value:.2f}" if value else "-"


def _gain(gain: Optional[float], spread_pct: float) -> str:
    return f"{gain:+.0f} % ± {spread_pct:.0f}" if gain is not None else "-"


def render_markdown(summary: Mapping[str, Any], base: Optional[Message] = None) -> str:
    """``tune.md``: the table, the combined config against the default, the flags and batching.config."""
    rows, total = table_rows(summary), combined(summary)
    config = chosen_config(summary)
    name = published_name(summary["model"], str(config["variant"]))
    lines = [f"# Tuning {summary['model']} on this host ({summary['backend']} server"
             f"{', GPU' if summary.get('gpu') else ''}, {summary['protocol']})", "",
             f"Command: `{summary.get('command', 'python -m loadtest tune')}`  ",
             f"Host: {summary.get('cpus')} CPUs, load average {_load(summary)} at the end; "
             f"{summary.get('seconds', 0):.0f} s. Throughput = the most req/s of any concurrency level "
             f"({','.join(map(str, summary['levels']))}) with p99 <= {summary['p99_budget_ms']} ms and no errors; "
             f"latency = p50 at concurrency 1. Every candidate was swept in turn with the default "
             f"({summary['rounds']} paired rounds); gain ± half the range of the per-round ratios. A setting is "
             f"adopted when its gain beyond that spread exceeds --min-gain ({100 * summary['min_gain']:.0f} %); "
             "each row was measured on top of the rows adopted above it.", "",
             "Server CPU ms/request (at the top level) is the noise-robust check on a shared machine.", "",
             "| setting | default | tuned | latency (ms) p50 c=1 | throughput gain | server CPU ms/req | verdict "
             "| values tried (x req/s) |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        tried = ", ".join(f"{t['value']}" + (f" (with {' '.join(t['on_top_of'])})" if t.get("on_top_of") else "")
                          + ": " + ("error" if t.get("error") else f"x{t['throughput_ratio']:.2f}")
                          for t in row.get("tried", []))
        on_top = f" (with {' '.join(row['on_top_of'])})" if row.get("on_top_of") else ""
        lines.append(f"| {row['setting']} | {row['default']} | {row['tuned']}{on_top} | "
                     f"{_ms(row.get('p50_before_ms'))} → {_ms(row.get('p50_after_ms'))} | "
                     f"{_gain(row.get('gain_pct'), row.get('spread_pct', 0.0))} | "
                     f"{_ms(row.get('cpu_before_ms'))} → {_ms(row.get('cpu_after_ms'))} | {row['verdict']} | "
                     f"{tried or '-'} |")
    knobs = [k for k in space.BATCHING_KNOBS if len(grid_of(summary, k)) > 1]
    if knobs and summary["search_best"]["batching"] == "off":
        lines += ["", f"Batching parameters ({', '.join(knobs)}) were not searched: batching stayed off."]
    lines += ["", "## Combined best against the default", ""]
    rounds = total["rounds"]
    per_round = "; ".join(f"{r['candidate_rps']:.1f} vs {r['baseline_rps']:.1f}" for r in rounds)
    label = "the default against itself (no candidate won the search: this is the noise floor)" \
        if total["is_default"] else "the search's winner: " + _config_text(total["config"], summary["default"])
    lines += [f"Final check, {len(rounds)} fresh paired rounds, {label}:", "",
              "| | default | tuned |", "|---|---|---|",
              f"| throughput within p99 <= {summary['p99_budget_ms']} ms (req/s) | {total['baseline_rps']:.1f} | "
              f"{total['tuned_rps']:.1f} ({_gain(total['gain_pct'], total['spread_pct'])}) |",
              f"| p50 at concurrency 1 (ms) | {_ms(total['p50_before_ms'])} | {_ms(total['p50_after_ms'])} |",
              f"| server CPU per request at the top level (ms) | {_ms(total['cpu_before_ms'])} | "
              f"{_ms(total['cpu_after_ms'])} |", "",
              f"Per round (tuned vs default req/s): {per_round or '-'}.", ""]
    if total["holds"]:
        lines.append(f"Verdict: the tuned config beats the default by more than --min-gain "
                     f"({100 * summary['min_gain']:.0f} %) beyond the spread of fresh rounds; use it.")
    elif total["is_default"]:
        lines.append("Verdict: no setting beat TF Serving's defaults by more than --min-gain on this host; "
                     "keep them.")
    else:
        lines.append(f"Verdict: the search's winner did not hold up in fresh rounds (x{total['ratio']:.2f} ± "
                     f"{total['spread_pct'] / 100:.2f}; it needs more than x{1 + summary['min_gain']:.2f} beyond the "
                     "spread); keep TF Serving's defaults.")
    flags = recommended_flags(summary, config)
    lines += ["", "## Flags to use", "",
              f"Serve `{name}` (its `models.config` entry: `name: \"{name}\"`, base path `/models/{name}`), with:",
              "", "docker-compose (`services.tfserving.command`):", "", "```yaml",
              *[f"      - {flag}" for flag in flags], "```", "",
              "Kubernetes (the TF Serving container's `args`):", "", "```yaml",
              *[f"        - {flag}" for flag in flags], "```", ""]
    text = batching_text(config, base)
    if text is None:
        lines += ["Batching stays off: no `--enable_batching`, no `batching.config`.", ""]
    else:
        lines += ["`batching.config` (written beside this file):", "", "```", text.rstrip(), "```", ""]
    if summary.get("skipped"):
        lines += ["## Skipped on this host", ""]
        lines += [f"- {name}: {reason}" for name, reason in summary["skipped"].items()]
        lines.append("")
    return "\n".join(lines)


def grid_of(summary: Mapping[str, Any], dimension: str) -> list[space.Setting]:
    return list(summary.get("grid", {}).get(dimension, []))


def _load(summary: Mapping[str, Any]) -> str:
    load = summary.get("load_average") or []
    return f"{load[0]:.1f}" if load else "?"


def _config_text(config: Mapping[str, space.Setting], default: Mapping[str, space.Setting]) -> str:
    diff = [f"{k}={config[k]}" for k in space.DIMENSIONS if config.get(k) != default.get(k)
            and not (k in space.BATCHING_KNOBS and config.get("batching") == "off")]
    return " ".join(diff) or "default"


def _series(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The final rounds as sweep-shaped series (``loadtest.compare`` reads them level by level)."""
    rounds = summary["final"]["rounds"]
    series = []
    for side, label in (("baseline", "default"), ("candidate", "tuned")):
        by_level: dict[float, list[dict[str, Any]]] = {}
        for r in rounds:
            for level in r[f"{side}_levels"]:
                by_level.setdefault(level["level"], []).append(level)
        levels = []
        for level, samples in sorted(by_level.items()):
            mean = {k: sum(s[k] for s in samples) / len(samples) for k in ("throughput_rps", "p50_ms", "p99_ms")}
            levels.append({"level": level, **mean, "rounds": samples})
        series.append({"label": f"{summary['model']}/{summary['protocol']}/{label}", "levels": levels})
    return series


def write_report(summary: dict[str, Any], out: Path, base: Optional[Message] = None) -> dict[str, Path]:
    """Write ``tune.json`` (with ``rows``, ``combined``, ``recommended`` and sweep-shaped ``series``),
    ``tune.md``, ``tune.png``, ``tune.csv`` and ``batching.config`` (when batching is recommended)."""
    out.mkdir(parents=True, exist_ok=True)
    config = chosen_config(summary)
    summary = {"kind": "tune", **summary, "rows": table_rows(summary), "combined": combined(summary),
               "recommended": {"config": config, "model": published_name(summary["model"], str(config["variant"])),
                               "flags": recommended_flags(summary, config),
                               "batching_config": batching_text(config, base)},
               "series": _series(summary)}
    paths = {"json": out / "tune.json", "markdown": out / "tune.md", "png": out / "tune.png", "csv": out / "tune.csv"}
    paths["json"].write_text(json.dumps(summary, indent=2, default=str))
    paths["markdown"].write_text(render_markdown(summary, base))
    plot_tune_rows(summary["rows"], summary["combined"], paths["png"], title=f"{summary['model']}: tuned vs default")
    _write_csv(paths["csv"], summary["trials"] + [summary["final"]], summary["default"])
    batching = summary["recommended"]["batching_config"]
    stale = out / "batching.config"
    if batching is not None:
        stale.write_text(f"# Tuned by `python -m loadtest tune` for {summary['model']}; see tune.md.\n\n{batching}")
        paths["batching"] = stale
    else:
        stale.unlink(missing_ok=True)
    return paths


def _write_csv(path: Path, trials: Sequence[Mapping[str, Any]], default: Mapping[str, space.Setting]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["trial", "label", "dimension", "config", "candidate_rps", "default_rps", "throughput_ratio",
                         "throughput_spread", "candidate_p50_c1_ms", "default_p50_c1_ms", "rounds", "error", "note"])
        for t in trials:
            writer.writerow([t["index"], t["label"], t["dimension"], _config_text(t["config"], default),
                             f"{t['score_rps']:.1f}", f"{t['baseline_rps']:.1f}", f"{t['throughput_ratio']:.3f}",
                             f"{t['throughput_spread']:.3f}", _ms(t.get("p50_c1_ms")),
                             _ms(t.get("baseline_p50_c1_ms")), len(t["rounds"]), t.get("error") or "",
                             t.get("note") or ""])
