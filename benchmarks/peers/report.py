"""The peers report, a pure function of ``Measurements``: medians over rounds with their spread,
the ratios (embedded / each peer, served / in-process), the targets and the exit status."""
from __future__ import annotations

import statistics
from typing import Any, Optional, Sequence

from benchmarks.peers.measurements import Measurements
from benchmarks.peers.scenarios import HIGH_CONCURRENCY, TODAY_RESNET50_REST_C1
from benchmarks.targets import (BATCHING_ADDED_P50_MS, BATCHING_GAIN_LARGE, BATCHING_GAIN_SMALL,
                               GRPC_CLIENT_OVER_REST_CLIENT, GRPC_SERVER_CPU_OVER_REST, Target)

__all__ = ["comparable_series", "evaluate", "exit_code", "render"]


def _fmt(value: Optional[float], digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _median(values: Sequence[Optional[float]]) -> Optional[float]:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _spread_pct(values: Sequence[Optional[float]]) -> Optional[float]:
    """Half the range over the median, %: the ±x of a figure measured over several rounds."""
    present = [v for v in values if v is not None]
    middle = _median(present)
    if len(present) < 2 or not middle:
        return None
    return (max(present) - min(present)) / 2 / middle * 100


def _metric(m: Measurements, model: str, server: str, key: str, metric: str = "rps") -> Optional[float]:
    return _median([getattr(p, metric) for p in m.points(model, server, key)])


def _paired_ratio(m: Measurements, model: str, a: tuple[str, str], b: tuple[str, str],
                  metric: str = "rps") -> Optional[float]:
    """Median over rounds of ``a / b`` (each a (server, point key)), each round's two figures side by side."""
    ratios = [getattr(x, metric) / getattr(y, metric) for x, y in zip(m.points(model, *a), m.points(model, *b))
              if getattr(x, metric) is not None and getattr(y, metric)]
    return _median(ratios)


def _high(model: str) -> int:
    return HIGH_CONCURRENCY.get(model, 32)


def evaluate(m: Measurements) -> tuple[list[Target], list[Target], list[str]]:
    """The targets: (targets, stretch targets, targets not measured)."""
    targets: list[Target] = []
    unmeasured: list[str] = []

    def check(name: str, value: Optional[float], limit: float, higher: bool = True, unit: str = "x") -> None:
        if value is None:
            unmeasured.append(name)
        else:
            targets.append(Target(name, value, limit, higher_is_better=higher, unit=unit))

    image, small = "resnet50", "digits"
    rest_c1 = _metric(m, image, "embedded", "rest c=1")
    check(f"{image} REST c=1 / today's {TODAY_RESNET50_REST_C1} req/s (before the REST work)",
          None if rest_c1 is None else rest_c1 / TODAY_RESNET50_REST_C1, 2.0)
    check(f"{image} REST c=1 / embedded gRPC c=1 (req/s)",
          _paired_ratio(m, image, ("embedded", "rest c=1"), ("embedded", "grpc c=1")), 0.6)
    high = _high(small)
    check(f"{small} c={high} server CPU per request, gRPC / REST (no batching)",
          _paired_ratio(m, small, ("embedded", f"grpc c={high}"), ("embedded", f"rest c={high}"), "cpu_ms"),
          GRPC_SERVER_CPU_OVER_REST, higher=False)
    check(f"{small} c={high} SDK GrpcClient / RestClient (req/s)",
          _paired_ratio(m, small, ("embedded", f"sdk-grpc c={high}"), ("embedded", f"sdk-rest c={high}")), GRPC_CLIENT_OVER_REST_CLIENT)
    timeout_ms = m.settings.batch_timeout_micros / 1e3
    for protocol in ("rest", "grpc"):
        check(f"{small} {protocol} c={high} batching on / off (req/s)",
              _paired_ratio(m, small, ("embedded+batching", f"{protocol} c={high}"),
                            ("embedded", f"{protocol} c={high}")), BATCHING_GAIN_SMALL)
        on, off = _metric(m, small, "embedded+batching", f"{protocol} c=1", "p50_ms"), \
            _metric(m, small, "embedded", f"{protocol} c=1", "p50_ms")
        check(f"{small} {protocol} c=1 p50 added by batching (limit: batch_timeout {timeout_ms:g} ms "
              f"+ {BATCHING_ADDED_P50_MS} ms)",
              None if on is None or off is None else on - off, timeout_ms + BATCHING_ADDED_P50_MS, higher=False,
              unit=" ms")
    check(f"{image} gRPC c={_high(image)} batching on / off (req/s)",
          _paired_ratio(m, image, ("embedded+batching", f"grpc c={_high(image)}"),
                        ("embedded", f"grpc c={_high(image)}")), BATCHING_GAIN_LARGE)
    for model, servers in m.servers.items():
        best = min((v for v in (_median(r.rss_mb) for s, r in servers.items() if not s.startswith("embedded"))
                    if v is not None), default=None)
        own = _median(servers["embedded"].rss_mb) if "embedded" in servers else None
        check(f"{model} embedded RSS - best peer's (MB)", None if best is None or own is None else own - best,
              50.0, higher=False, unit=" MB")
    stretch: list[Target] = []
    served = max((v for v in (_metric(m, small, "embedded", f"{p} c={high}") for p in ("rest", "grpc"))
                  if v is not None), default=None)
    local = _median(m.in_process.get(small, {}).get(f"b1 t{m.machine.cores}", []))
    if served is not None and local:
        stretch.append(Target(f"{small} served c={high} (best protocol, no batching) / in-process batch 1 (rows/s)",
                              served / local, 0.4))
    return targets, stretch, unmeasured


def exit_code(m: Measurements) -> int:
    """1 when a target was measured and missed (stretch targets and unmeasured ones never fail)."""
    targets, _, _ = evaluate(m)
    return 0 if all(t.passed for t in targets) else 1


def _server_rows(m: Measurements, model: str) -> list[str]:
    servers = m.servers.get(model, {})
    keys = sorted({k for s in servers.values() for k in s.points},
                  key=lambda k: (k.split()[0] != "rest", k.split()[0], int(k.split("=")[1])))
    head = f"{'server':<18}" + "".join(f"{k:>22}" for k in keys) + f"{'cold start s':>14}{'RSS MB':>9}{'anon MB':>9}"
    lines = [f"{model}: req/s (p50 ms) ±spread over rounds; CPU-ms per request on the line below", head,
             "-" * len(head)]
    for server, entry in servers.items():
        rates, cpus = [], []
        for key in keys:
            points = entry.points.get(key, [])
            rps, p50 = _median([p.rps for p in points]), _median([p.p50_ms for p in points])
            spread = _spread_pct([p.rps for p in points])
            cell = "" if rps is None else f"{rps:.1f} ({_fmt(p50)})" + (f" ±{spread:.0f}%" if spread else "")
            rates.append(f"{cell:>22}")
            cpu = _median([p.cpu_ms for p in points])
            cpus.append(f"{'' if cpu is None else f'{cpu:.2f} ms':>22}")
        lines.append(f"{server:<18}{''.join(rates)}{_fmt(_median(entry.cold_start_s)):>14}"
                     f"{_fmt(_median(entry.rss_mb), 0):>9}{_fmt(_median(entry.rss_anon_mb), 0):>9}")
        lines.append(f"{'  CPU/request':<18}{''.join(cpus)}")
        errors = {key: sum(p.errors for p in entry.points.get(key, [])) for key in keys}
        if any(errors.values()):
            lines.append(f"{'  failed requests':<18}" + "".join(f"{n or '':>22}" for n in errors.values()))
    return lines


def _ratio_rows(m: Measurements, model: str) -> list[str]:
    servers = m.servers.get(model, {})
    lines = []
    for key in ("rest c=1", f"rest c={_high(model)}"):
        parts = [f"{peer} {ratio:.2f}x" for peer in servers if not peer.startswith("embedded")
                 for ratio in [_paired_ratio(m, model, ("embedded", key), (peer, key))] if ratio is not None]
        if parts:
            lines.append(f"  embedded / peer, {key} (req/s): " + ", ".join(parts))
    local = m.in_process.get(model, {})
    cores = m.machine.cores
    pairs = (("rest c=1", "b1 t1"), ("grpc c=1", "b1 t1"), (f"rest c={_high(model)}", f"b1 t{cores}"),
             (f"grpc c={_high(model)}", f"b1 t{cores}"))
    for key, where in pairs:
        for server in ("embedded", "embedded+batching"):
            served, ceiling = _metric(m, model, server, key), _median(local.get(where, []))
            if served is not None and ceiling:
                lines.append(f"  {server} {key} / in-process {where}: {served:.1f} / {ceiling:.1f} = "
                             f"{served / ceiling:.2f}")
    return lines


def comparable_series(m: Measurements) -> list[dict[str, Any]]:
    """The points in ``python -m loadtest compare``'s generic shape: one series per model and server
    (``digits/embedded``), one level per point (``rest c=32``), each round a sample."""
    series = []
    for model, servers in m.servers.items():
        for server, record in servers.items():
            levels = []
            for point, rounds in record.points.items():
                samples = [{"throughput_rps": r.rps, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms}
                           for r in rounds if r.requests]
                if samples:
                    levels.append({"level": point, "rounds": samples})
            if levels:
                series.append({"label": f"{model}/{server}", "levels": levels})
    return series


def render(m: Measurements) -> str:
    """The report: tables, ratios, targets."""
    machine, settings = m.machine, m.settings
    lines = [(f"machine: {machine.cpu}, {machine.cores} cores, Python {machine.python}; 1-min load "
              f"{_fmt(machine.load_before)} before, {_fmt(machine.load_after)} after"),
             (f"command: {settings.command}; {settings.rounds} interleaved rounds, "
              f"every server restarted each round; batching: {settings.batching_file}"), ""]
    for name, reason in m.skipped.items():
        lines.append(f"SKIPPED {name}: {reason.splitlines()[0] if reason else ''}")
    for model in m.servers:
        lines += [""] + _server_rows(m, model)
        local = m.in_process.get(model, {})
        if local:
            lines.append("in-process (Session callable, rows/s): " + ", ".join(
                f"{k} {_median(v):.1f}" + (f" ±{_spread_pct(v):.0f}%" if _spread_pct(v) else "")
                for k, v in local.items()))
        lines += _ratio_rows(m, model)
    targets, stretch, unmeasured = evaluate(m)
    lines.append("")
    lines += [t.verdict() for t in targets]
    for t in stretch:
        lines.append(f"{'MET ' if t.passed else 'NOT MET'}  stretch: {t.name}: {t.ratio:.2f} (target >= {t.limit})")
    for name in unmeasured:
        lines.append(f"SKIP  {name}: not measured in this run")
    failed = [t.name for t in targets if not t.passed]
    lines.append(f"missed targets: {'; '.join(failed)}" if failed else "every measured target met")
    return "\n".join(lines)
