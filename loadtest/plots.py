"""Load-test plots (matplotlib's object API, Agg canvas, PNG): throughput against latency, and a
capacity plan's simulated timeline, and the tuner's table."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

if TYPE_CHECKING:  # loadtest.sweep imports this module
    from matplotlib.axes import Axes

    from loadtest.fleet import SimulationResult
    from loadtest.sweep import Series
    from serving.codec import JSON

__all__ = ["plot_throughput_latency", "plot_simulation", "plot_tune_rows", "series_name",
           "throughput_latency_figure"]


_API_NAMES = {"grpc": "gRPC", "rest": "REST"}
_LEVEL_AXES = {"concurrency": "concurrency (requests in flight)", "rate": "offered rate (requests/s)"}


def series_name(series: "Series") -> str:
    """What a reader calls a series: ``digits over gRPC``, with ``, batching on`` where the sweep chose it."""
    name = f"{series.model} over {_API_NAMES.get(series.protocol, series.protocol)}"
    return name if series.batching == "running" else f"{name}, batching {series.batching}"


def _plain(value: float, _position: object = None) -> str:
    return f"{value:g}"


def plot_throughput_latency(all_series: Sequence["Series"], path: Path, *,
                            title: str = "throughput vs latency") -> Path:
    """``throughput_latency_figure`` written to ``path`` as a PNG."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    throughput_latency_figure(all_series, title=title).savefig(path)
    return path


def throughput_latency_figure(all_series: Sequence["Series"], *, title: str = "throughput vs latency") -> Figure:
    """Two panels. Left: x = throughput (req/s), y = p99 (solid) and p50 (dashed) in ms, points labelled by level.
    Right: throughput against the level, ticked at exactly the measured levels as plain numbers.

    Log axes are labelled with plain numbers (``2``, ``5``, ``10``), never ``2×10^0``. A ``Figure`` with its
    own Agg canvas: no pyplot, so no process-wide backend or figure state.
    """
    fig = Figure(figsize=(12, 5.5), dpi=110)
    FigureCanvasAgg(fig)
    latency_ax, level_ax = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    levels: set[float] = set()
    mode = "concurrency"
    for index, series in enumerate(all_series):
        color, name = f"C{index % 10}", series_name(series)
        xs = [r.throughput_rps for r in series.levels]
        latency_ax.plot(xs, [r.p99_ms for r in series.levels], "o-", color=color, label=f"{name}: p99")
        latency_ax.plot(xs, [r.p50_ms for r in series.levels], "s--", color=color, alpha=0.6, label=f"{name}: p50")
        for r in series.levels:
            latency_ax.annotate(f"{r.level:g}", (r.throughput_rps, r.p99_ms), textcoords="offset points",
                                xytext=(5, 5), fontsize=10, color=color)
        level_ax.plot([r.level for r in series.levels], xs, "o-", color=color, label=name)
        _mark_limiter(latency_ax, level_ax, series, color)
        levels.update(r.level for r in series.levels)
        mode = next((r.mode for r in series.levels), mode)
    latency_ax.set_xlabel("throughput (successful requests/s)", fontsize=11)
    latency_ax.set_ylabel("latency (ms)", fontsize=11)
    latency_ax.set_yscale("log")
    latency_ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    latency_ax.yaxis.set_minor_formatter(FuncFormatter(_plain))  # a narrow decade shows 2, 3, 5 in plain numbers
    latency_ax.set_title(f"latency against throughput (point labels: {mode})", fontsize=11)
    latency_ax.grid(True, which="both", alpha=0.3)
    latency_ax.legend(fontsize=9, loc="upper left")
    _level_axis(level_ax, sorted(levels), mode)
    for ax in (latency_ax, level_ax):
        ax.tick_params(labelsize=10)
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    return fig


def _mark_limiter(latency_ax: Axes, level_ax: Axes, series: "Series", color: str) -> None:
    """Where the gateway's limiter began refusing (``Series.limiter_began_at``): a dotted line at that level,
    and a ring round that level's point; from there on the curve is the limiter's, not the server's."""
    began = series.limiter_began_at
    first = next((r for r in series.levels if r.level == began), None) if began is not None else None
    if began is None or first is None:
        return
    level_ax.axvline(began, color=color, linestyle=":", label=f"{series_name(series)}: gateway limiter began")
    latency_ax.plot([first.throughput_rps], [first.p99_ms], "o", markersize=14, markerfacecolor="none",
                    markeredgecolor=color, label=f"{series_name(series)}: gateway limiter began")


def _level_axis(ax: Axes, levels: Sequence[float], mode: str) -> None:
    """Throughput against the level: a log x axis ticked at the measured levels only, as plain numbers."""
    if levels and levels[0] > 0 and levels[-1] / levels[0] >= 4:
        ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(levels))
    ax.xaxis.set_major_formatter(FuncFormatter(_plain))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(_LEVEL_AXES.get(mode, mode), fontsize=11)
    ax.set_ylabel("throughput (successful requests/s)", fontsize=11)
    ax.set_title(f"throughput against {mode}", fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=9, loc="upper left")


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


def _number(row: Mapping[str, JSON], key: str) -> float:
    """A number of a tune table row (``loadtest.tune_report``); 0 where it has none."""
    value = row.get(key)
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"the tune table's {key} is a number, not {value!r}")
    return float(value)


def _text(row: Mapping[str, JSON], key: str) -> str:
    value = row[key]
    if not isinstance(value, str):
        raise ValueError(f"the tune table's {key} is text, not {value!r}")
    return value


def plot_tune_rows(rows: Sequence[Mapping[str, JSON]], total: Mapping[str, JSON], path: Path, *,
                   title: str = "tuned vs default") -> Path:
    """The tuner's table as a picture: throughput gain ± spread per setting (left) and p50 at concurrency 1,
    default against tuned (right); the combined config is the last bar. Rows without numbers are left out."""
    measured = [r for r in rows if r.get("gain_pct") is not None]
    final = "default vs itself (noise floor)" if total.get("is_default") else "combined best"
    labels = [f"{_text(r, 'setting').split(' (')[0]}: {r['tuned']}" for r in measured] + [f"{final} (final rounds)"]
    gains = [_number(r, "gain_pct") for r in measured + [total]]
    spreads = [_number(r, "spread_pct") for r in measured + [total]]
    before = [_number(r, "p50_before_ms") for r in measured + [total]]
    after = [_number(r, "p50_after_ms") for r in measured + [total]]
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
