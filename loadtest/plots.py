"""Load-test plots (matplotlib's object API, Agg canvas, PNG): throughput against latency, and a
capacity plan's simulated timeline, and the tuner's table."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

if TYPE_CHECKING:  # loadtest.sweep imports this module
    from loadtest.fleet import SimulationResult
    from loadtest.sweep import Series

__all__ = ["plot_throughput_latency", "plot_simulation", "plot_tune_rows"]


def plot_throughput_latency(all_series: Sequence["Series"], path: Path, *,
                            title: str = "throughput vs latency") -> Path:
    """One line per series: x = throughput (req/s), y = p99 (solid) and p50 (dashed) in ms; points labelled by level.

    A ``Figure`` with its own Agg canvas: no pyplot, so no process-wide backend or figure state.
    """
    fig = Figure(figsize=(9, 5.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for index, series in enumerate(all_series):
        color = f"C{index % 10}"
        xs = [r.throughput_rps for r in series.levels]
        ax.plot(xs, [r.p99_ms for r in series.levels], "o-", color=color, label=f"{series.label} p99")
        ax.plot(xs, [r.p50_ms for r in series.levels], "s--", color=color, alpha=0.6, label=f"{series.label} p50")
        for r in series.levels:
            ax.annotate(f"{r.level:g}", (r.throughput_rps, r.p99_ms), textcoords="offset points", xytext=(4, 4),
                        fontsize=7, color=color)
    ax.set_xlabel("throughput (successful requests/s)")
    ax.set_ylabel("latency (ms)")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def plot_simulation(result: "SimulationResult", path: Path, *, p99_budget_ms: float, capacity_rps: float) -> Path:
    """Three panels over time (minutes): offered load against the ready pods' capacity, replicas (all and
    ready), and p99 against the budget; seconds where the ready pods were overloaded are marked at the top."""
    line = result.timeline
    minutes = [t / 60.0 for t in line.t]
    fig = Figure(figsize=(10, 7.5), dpi=100)
    FigureCanvasAgg(fig)
    load_ax, replica_ax, p99_ax = fig.subplots(3, 1, sharex=True)
    load_ax.plot(minutes, line.load_rps, color="C0", label="offered load")
    load_ax.plot(minutes, [n * capacity_rps for n in line.ready], color="C3", alpha=0.6,
                 label="ready pods x measured capacity")
    load_ax.set_ylabel("requests/s")
    load_ax.legend(fontsize=7, loc="upper left")
    replica_ax.step(minutes, line.replicas, where="post", color="C1", label="replicas (incl. starting)")
    replica_ax.step(minutes, line.ready, where="post", color="C2", label="ready")
    replica_ax.set_ylabel("pods")
    replica_ax.legend(fontsize=7, loc="upper left")
    finite = [v for v in line.p99_ms if v != float("inf")]
    top = max(finite + [p99_budget_ms]) * 1.5
    p99_ax.plot(minutes, [min(v, top) for v in line.p99_ms], color="C4", label="p99 (overload drawn at top)")
    p99_ax.axhline(p99_budget_ms, color="C3", linestyle="--", label=f"budget {p99_budget_ms:g} ms")
    p99_ax.set_ylabel("p99 (ms)")
    p99_ax.set_xlabel("minutes")
    p99_ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"{result.profile}: {result.violation_minutes:.1f} SLO-violation minutes, "
                 f"{result.replica_hours:.1f} replica-hours")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def plot_tune_rows(rows: Sequence[Mapping[str, Any]], total: Mapping[str, Any], path: Path, *,
                   title: str = "tuned vs default") -> Path:
    """The tuner's table as a picture: throughput gain ± spread per setting (left) and p50 at concurrency 1,
    default against tuned (right); the combined config is the last bar. Rows without numbers are left out."""
    measured = [r for r in rows if r.get("gain_pct") is not None]
    final = "default vs itself (noise floor)" if total.get("is_default") else "combined best"
    labels = [f"{r['setting'].split(' (')[0]}: {r['tuned']}" for r in measured] + [f"{final} (final rounds)"]
    gains = [r["gain_pct"] for r in measured] + [total.get("gain_pct") or 0.0]
    spreads = [r.get("spread_pct", 0.0) for r in measured] + [total.get("spread_pct", 0.0)]
    before = [r.get("p50_before_ms") or 0.0 for r in measured] + [total.get("p50_before_ms") or 0.0]
    after = [r.get("p50_after_ms") or 0.0 for r in measured] + [total.get("p50_after_ms") or 0.0]
    fig = Figure(figsize=(11, 0.45 * len(labels) + 2.2), dpi=110)
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, sharey=True)
    ys = list(range(len(labels)))
    colors = ["C2" if g > 0 else "C3" for g in gains]
    left.barh(ys, gains, xerr=spreads, color=colors, alpha=0.8, capsize=3)
    left.axvline(0, color="black", linewidth=0.8)
    left.set_yticks(ys, labels, fontsize=7)
    left.invert_yaxis()
    left.set_xlabel("throughput gain vs default (%), ± spread over rounds")
    height = 0.38
    right.barh([y - height / 2 for y in ys], before, height, label="default", color="C7")
    right.barh([y + height / 2 for y in ys], after, height, label="tuned", color="C0")
    right.set_xlabel("p50 latency at concurrency 1 (ms)")
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path
