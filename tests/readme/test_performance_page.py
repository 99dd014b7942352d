"""docs/performance.md is the generator's output over the committed measurements, never edited by hand."""
from __future__ import annotations

import json
from pathlib import Path
import sys

from benchmarks import report_docs


def test_the_committed_page_is_the_generators_output():
    page = (report_docs.REPO_ROOT / "docs" / "performance.md").read_text()
    assert page == report_docs.render_page(), (
        "docs/performance.md differs from its measurements: "
        "python -m benchmarks.report_docs render > docs/performance.md")


def test_every_committed_measurement_says_where_and_how_it_ran():
    page = report_docs.render_page()
    measured = sorted(p for p in report_docs.MEASUREMENTS_DIR.glob("*.json") if not p.name.endswith(".meta.json"))
    assert measured, "docs/measurements/ holds no measurement"
    assert page.count("- Command: `python -m benchmarks.") == len(measured)
    assert "- Machine: ?" not in page and "Command: `?`" not in page


def test_record_writes_the_command_and_the_machine_beside_the_json(tmp_path):
    script = "import json, sys; json.dump([{'side': 'direct', 'requests_per_s': 1.5}], open(sys.argv[1], 'w'))"
    assert report_docs.main(["record", "--measurements", str(tmp_path), "--max-load", "1e9", "toy", "--",
                             sys.executable, "-c", script, "{json}"]) == 0
    meta = json.loads((tmp_path / "toy.meta.json").read_text())
    assert meta["command"].endswith("toy.json") and meta["exit_status"] == 0
    assert meta["machine"]["cores"] >= 1 and "load_after" in meta["machine"]
    page = report_docs.render_page(tmp_path)
    assert "## toy" in page and "requests_per_s" in page and "1.50" in page
    assert f"cores, {meta['machine']['memory_gib']} GiB" in page
    assert "at the start" in page and "at the end" in page and "**Recorded on a busy machine**" not in page


def _toy(tmp_path, *options, load=0.2, script="import json, sys; json.dump({'a': 1}, open(sys.argv[1], 'w'))"):
    return report_docs.record("toy", [sys.executable, "-c", script, "{json}", *options], tmp_path, max_load=1.5,
                              load=lambda: load, **({} if load <= 1.5 else {"busy_ok": "busy" in options}))


def test_record_refuses_a_busy_machine_and_writes_nothing(tmp_path, capsys):
    assert _toy(tmp_path, load=3.0) == 2
    assert list(tmp_path.iterdir()) == []
    err = capsys.readouterr().err
    assert "the machine is busy (1-minute load average 3.00 > 1.50" in err and "--busy-ok" in err


def test_a_busy_recording_says_so_on_the_page(tmp_path):
    assert report_docs.record("toy", [sys.executable, "-c", "import json, sys; json.dump({'a': 1}, "
                                      "open(sys.argv[1], 'w'))", "{json}"], tmp_path, max_load=1.5,
                              busy_ok=True, load=lambda: 3.0) == 0
    assert json.loads((tmp_path / "toy.meta.json").read_text())["busy"] is True
    page = report_docs.render_page(tmp_path)
    assert "**Recorded on a busy machine**: the 1-minute load average was 3.00 at the start, above 1.50" in page
    assert "1-minute load average 3.00 at the start, 3.00 at the end" in page


def test_the_default_threshold_is_per_core():
    assert report_docs.load_threshold(2) == 1.5 and report_docs.load_threshold(8, 2.0) == 2.0


def test_record_refuses_fewer_than_three_rounds_before_running(tmp_path, capsys):
    for options in (["--rounds", "1"], ["--rounds=2"], ["--quick"]):
        assert _toy(tmp_path, *options) == 2
    assert list(tmp_path.iterdir()) == []
    assert capsys.readouterr().err.count("at least 3") == 3
    assert _toy(tmp_path, "--rounds", "3") == 0


def test_a_recording_of_fewer_rounds_or_without_its_record_is_marked(tmp_path):
    (tmp_path / "one.json").write_text(json.dumps({"settings": {"rounds": 1, "command": "python -m x"}}))
    page = report_docs.render_page(tmp_path)
    assert "**1 round only** (a recording needs 3)" in page
    assert "**Not recorded through `python -m benchmarks.report_docs record`**" in page
    assert report_docs.recorded_rounds({"series": [{"levels": [{"rounds": [{}, {}, {}]}, {"rounds": [{}]}]}]}) == 1
    assert report_docs.recorded_rounds([{"a": 1}]) is None


def test_record_writes_only_paths_relative_to_the_checkout(tmp_path):
    inside = report_docs.REPO_ROOT / "serving" / "batching.cpu.config"
    script = (f"import json, sys; json.dump({{'batching': '{inside}', 'repo': '/tmp/bench/models', "
              "'command': 'x --json ' + sys.argv[1]}, open(sys.argv[1], 'w'))")
    assert _toy(tmp_path, script=script) == 0
    written = json.loads((tmp_path / "toy.json").read_text())
    assert written["batching"] == "serving/batching.cpu.config"
    assert written["repo"] == "<outside the checkout>/models"
    assert written["command"] == "x --json <outside the checkout>/toy.json"
    meta = json.loads((tmp_path / "toy.meta.json").read_text())
    assert str(tmp_path) not in meta["command"] and sys.executable not in meta["command"]


def test_a_checkout_under_any_root_is_made_relative():
    # CI's checkout sat at /check/work/main, under no root the general pattern knows.
    root = Path("/check/work/main")
    assert report_docs.relative_paths({"a": "/check/work/main/serving/x.config", "b": "--json /check/work/main",
                                       "c": "/check/work/mainly/x", "d": "/tmp/y/models"}, root) == {
        "a": "serving/x.config", "b": "--json .", "c": "<outside the checkout>/x", "d": "<outside the checkout>/models"}


def test_record_runs_python_on_this_interpreter_and_records_the_command_as_written(tmp_path):
    script = "import json, sys; json.dump({'python': sys.executable}, open(sys.argv[1], 'w'))"
    assert report_docs.record("toy", ["python", "-c", script, "{json}"], tmp_path, max_load=1e9) == 0
    assert json.loads((tmp_path / "toy.json").read_text())["python"] == str(report_docs.relative_paths(sys.executable))
    assert json.loads((tmp_path / "toy.meta.json").read_text())["command"].startswith("python -c ")
