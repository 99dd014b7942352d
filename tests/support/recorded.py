"""Cells of ``benchmarks.runner`` from given figures (recorded input, no server): for the report tests."""
from __future__ import annotations

from typing import Optional, Sequence

from benchmarks.runner import Cell, Cells, Load
from loadtest.driver import Record, Window

__all__ = ["cell", "cells", "window"]


def window(rate: float, seconds: float = 2.0, latency: float = 0.001, server_cpu_ms: Optional[float] = None,
           client_cpu_ms: float = 0.0, errors: int = 0) -> Window:
    """``rate`` × ``seconds`` calls of ``latency`` s each (and ``errors`` failed ones); the server spent
    ``server_cpu_ms`` per call (None: not read)."""
    calls = int(round(rate * seconds))
    records = [Record(0.0, latency)] * calls + [Record(0.0, latency, "UNAVAILABLE")] * errors
    server = None if server_cpu_ms is None else calls * server_cpu_ms / 1e3
    return Window(records, seconds, calls * client_cpu_ms / 1e3, server)


def cell(server: str, load: Load, rates: Sequence[float], latency: float = 0.001, seconds: float = 2.0,
         server_cpu_ms: Optional[float] = None, client_cpu_ms: float = 0.0) -> Cell:
    """A cell of one window per rate in ``rates``."""
    return Cell(server, load, [window(r, seconds, latency, server_cpu_ms, client_cpu_ms) for r in rates])


def cells(*made: Cell) -> Cells:
    return {(c.server, c.load): c for c in made}
