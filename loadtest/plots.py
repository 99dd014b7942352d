"""Throughput-against-latency plots (matplotlib's object API, Agg canvas, PNG)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

if TYPE_CHECKING:  # loadtest.sweep imports this module
    from loadtest.sweep import Series

__all__ = ["plot_throughput_latency"]


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
