"""A benchmark's ``--json`` (``benchmarks.runner.to_json``): its cells in ``loadtest compare``'s generic shape,
which compare reads."""
from __future__ import annotations

import json

from benchmarks.runner import Cell, Load, to_json
from loadtest import compare
from tests.support.recorded import cells, window


def test_cells_become_series_and_their_windows_become_rounds(tmp_path):
    measured = cells(Cell("off", Load("digits", "grpc", 8), [window(400.0, 1.0, 0.015), window(440.0, 1.0, 0.012)]),
                     Cell("servable", Load("digits", "in-process", 1, 32), [window(9600.0 / 32, 1.0, 0.003)]))
    doc = to_json("benchmarks.server", measured)
    assert [s["label"] for s in doc["series"]] == ["digits/grpc/off", "digits/in-process/servable"]
    level = doc["series"][0]["levels"][0]
    assert level["level"] == "c8" and level["throughput_rps"] == 420.0 and len(level["rounds"]) == 2
    (tmp_path / "a.json").write_text(json.dumps(doc))
    loaded = compare.load_result(tmp_path / "a.json")
    assert loaded["digits/grpc/off"]["c8"]["throughput_rps"].samples == (400.0, 440.0)
    assert loaded["digits/in-process/servable"]["c1 b32"]["p50_ms"].value == 3.0
    assert loaded["digits/in-process/servable"]["c1 b32"]["throughput_rps"].value == 9600.0


def test_the_performance_page_renders_a_benchmarks_json_as_a_row_per_series_and_level(tmp_path):
    from benchmarks.report_docs import render_page

    measured = cells(Cell("direct", Load("digits", "grpc", 32), [window(1000.0, 1.0, 0.002)]),
                     Cell("gateway", Load("digits", "grpc", 32), [window(900.0, 1.0, 0.003)]))
    (tmp_path / "gateway.json").write_text(json.dumps(to_json("benchmarks.gateway", measured)))
    lines = render_page(tmp_path).splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("series"))
    assert lines[head].split() == ["series", "level", "throughput_rps", "p50_ms", "p99_ms", "errors"]
    assert lines[head + 1].split() == ["digits/grpc/direct", "c32", "1000.00", "2.00", "2.00", "0"]
    assert lines[head + 2].split()[:3] == ["digits/grpc/gateway", "c32", "900.00"]
