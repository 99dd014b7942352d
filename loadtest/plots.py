"""Load-test plots (matplotlib's object API, Agg canvas, PNG): throughput against latency, and a
capacity plan's simulated timeline."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

if TYPE_CHECKING:  # loadtest.sweep imports this module
    from loadtest.fleet import SimulationResult
    from loadtest.sweep import Series

__all__ = ["plot_throughput_latency", "plot_simulation"]


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
