"""docs/performance.md is the generator's output over the committed measurements, never edited by hand."""
from __future__ import annotations

import json
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
    assert report_docs.main(["record", "--measurements", str(tmp_path), "toy", "--",
                             sys.executable, "-c", script, "{json}"]) == 0
    meta = json.loads((tmp_path / "toy.meta.json").read_text())
    assert meta["command"].endswith("toy.json") and meta["exit_status"] == 0
    assert meta["machine"]["cores"] >= 1 and "load_after" in meta["machine"]
    page = report_docs.render_page(tmp_path)
    assert "## toy" in page and "requests_per_s" in page and "1.50" in page
    assert f"cores, {meta['machine']['memory_gib']} GiB" in page
