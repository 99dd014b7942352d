"""``benchmarks.server --json``: its points in ``loadtest compare``'s generic shape, which compare reads."""
from __future__ import annotations

import json

from benchmarks.server import Point, points_to_json
from loadtest import compare


def test_points_become_series_and_repeated_points_become_rounds(tmp_path):
    points = [Point("digits", "grpc", "off", 8, 400.0, [0.010, 0.020]),
              Point("digits", "grpc", "off", 8, 440.0, [0.012]),
              Point("digits", "in-process", "t1", 32, 9000.0, [0.003])]
    doc = points_to_json(points)
    assert [s["label"] for s in doc["series"]] == ["digits/grpc/off", "digits/in-process/t1"]
    level = doc["series"][0]["levels"][0]
    assert level["level"] == "c8" and level["throughput_rps"] == 420.0 and len(level["rounds"]) == 2
    (tmp_path / "a.json").write_text(json.dumps(doc))
    loaded = compare.load_result(tmp_path / "a.json")
    assert loaded["digits/grpc/off"]["c8"]["throughput_rps"].samples == (400.0, 440.0)
    assert loaded["digits/in-process/t1"]["b32"]["p50_ms"].value == 3.0
