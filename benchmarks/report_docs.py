"""docs/performance.md, generated from the JSON files the benchmarks write with ``--json``.

Numbers on the performance page are never pasted by hand: each measurement is a JSON file under
``docs/measurements/`` (``<benchmark>.json``), and the page is this module's output over them.
A benchmark whose JSON does not say where and how it ran (``benchmarks.peers`` does: its
``machine`` and ``settings.command``) is recorded through ``record``, which runs the command and
writes ``<benchmark>.meta.json`` beside it (the command, the machine, the time and the commit).

    python -m benchmarks.report_docs record peers -- python -m benchmarks.peers --rounds 3 --json {json}
    python -m benchmarks.report_docs render > docs/performance.md

``tests/readme/test_performance_page.py`` holds the committed page equal to ``render``'s output.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from benchmarks.peers import Measurements, render
from serving.server.launcher import REPO_ROOT

__all__ = ["MEASUREMENTS_DIR", "build_parser", "machine", "main", "record", "render_page"]

MEASUREMENTS_DIR = REPO_ROOT / "docs" / "measurements"
PAGE = "docs/performance.md"

# What each benchmark measures, in the page's words; a JSON file of another name is rendered generically.
TITLES = {
    "peers": "The embedded server beside the Python servers a user would pick instead (`benchmarks.peers`)",
    "server": "The embedded server's own ratios (`benchmarks.server`)",
    "gateway": "The gateway's cost on the compose stack (`benchmarks.gateway`)",
}

# How to read each benchmark's report: what it runs and what its columns mean (no numbers).
NOTES = {
    "peers": """\
Each server serves the same SavedModel on the same `tensorflow-cpu`: the embedded server without and
with batching, "Flask + `model.predict()`" under gunicorn (1 and 2 workers), FastAPI under uvicorn,
KServe's `ModelServer` (their apps are in `benchmarks/peer_apps/`, each installed at pinned versions
into its own venv under `.cache/peers/`), and TF Serving itself in Docker where an engine answers and
its image is present. One aiohttp client sends TF Serving REST bodies of one example; every server
is restarted each round, the rounds interleaved. "CPU/request" is the server's CPU-ms per request
(its process tree's `/proc` times over the timed window). "anon MB" is the anonymous part of RSS
(heap, arenas, stacks): RSS also counts file-backed pages of `libtensorflow_cc.so`, whose count
depends on the page cache, not on the server. The targets at the end are the benchmark's own; the
script exits 1 when one is missed. `python -m benchmarks.peers --render FILE` prints the same report
from the JSON.""",
}

INTRO = """\
Every number below comes from a JSON file under `docs/measurements/` that a benchmark wrote with
`--json`, with the command and the machine it ran on; this page is generated from them and never
edited by hand. Each benchmark measures its servers side by side, in interleaved rounds, in one run,
so the ratios are what to read: absolute rates depend on the machine and on what else ran on it
(the 1-minute load average is given before and after). The embedded server is not TF Serving:
measure real throughput against TF Serving on the target hardware (`make gpu-report` on a GPU host).
"""


def machine() -> dict:
    """The machine a command runs on: CPU model, usable cores, memory, Python, 1-minute load."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
               platform.processor() or "?")
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "memory_gib": round(pages / 2**30, 1),
            "python": platform.python_version(), "load_before": os.getloadavg()[0]}


def _commit() -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
    return result.stdout.strip() or "?"


def record(name: str, command: Sequence[str], out_dir: Path = MEASUREMENTS_DIR) -> int:
    """Run ``command`` (``{json}`` in it becomes ``<out_dir>/<name>.json``) and write ``<name>.meta.json``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{name}.json"
    argv = [part.replace("{json}", str(json_path)) for part in command]
    meta = {"command": " ".join(part.replace("{json}", f"{name}.json") for part in command),
            "machine": machine(), "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            "commit": _commit()}
    returncode = subprocess.run(argv, cwd=REPO_ROOT).returncode
    meta["machine"]["load_after"] = os.getloadavg()[0]
    meta["exit_status"] = returncode
    if json_path.exists():
        (out_dir / f"{name}.meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return returncode


def _peers_report(measurements: dict) -> str:
    return render(Measurements.from_json(measurements))  # the peers benchmark's own report of its --json


def _rows(measurements: object) -> list:
    """Flat rows of a JSON file: a benchmark's ``--json`` (``benchmarks.runner.to_json``: a row per series
    and level, its rounds left out), a list of flat objects as it is, or one object as one row."""
    if isinstance(measurements, dict) and isinstance(measurements.get("series"), list):
        return [{"series": series["label"], **{k: v for k, v in level.items() if k != "rounds"}}
                for series in measurements["series"] for level in series["levels"]]
    return measurements if isinstance(measurements, list) else [measurements]


def _table(rows: list) -> str:
    """A list of flat JSON objects as a text table."""
    keys = list(dict.fromkeys(k for row in rows for k in row))
    cells = [[_cell(row.get(k, "")) for k in keys] for row in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    lines = ["  ".join(k.ljust(w) for k, w in zip(keys, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(cell, widths)) for cell in cells]
    return "\n".join(line.rstrip() for line in lines)


def _cell(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


REPORTS: dict[str, Callable[[dict], str]] = {"peers": _peers_report}


def _where(meta: dict, measurements: object) -> list[str]:
    own = measurements if isinstance(measurements, dict) else {}
    where = {**own.get("machine", {}), **meta.get("machine", {})}
    command = meta.get("command") or own.get("settings", {}).get("command", "?")
    lines = [f"- Command: `{command}`"]
    if meta.get("started_utc"):
        lines.append(f"- Run: {meta['started_utc']} UTC, commit {meta.get('commit', '?')}, "
                     f"exit status {meta.get('exit_status', '?')}")
    memory = f", {where['memory_gib']} GiB" if "memory_gib" in where else ""
    lines.append(f"- Machine: {where.get('cpu', '?')}, {where.get('cores', '?')} cores{memory}, "
                 f"Python {where.get('python', '?')}; 1-minute load average {_load(where.get('load_before'))} "
                 f"before, {_load(where.get('load_after'))} after")
    return lines


def _load(value: Optional[float]) -> str:
    return "?" if value is None else f"{value:.2f}"


def render_page(measurements_dir: Path = MEASUREMENTS_DIR) -> str:
    """The performance page for every ``<name>.json`` in ``measurements_dir``. Pure over the files."""
    lines = [f"<!-- Generated by `python -m benchmarks.report_docs render > {PAGE}` from docs/measurements/. "
             "Do not edit. -->", "", "# Performance", "", INTRO.rstrip()]
    names = sorted(p.stem for p in measurements_dir.glob("*.json") if not p.name.endswith(".meta.json"))
    for name in names:
        measurements = json.loads((measurements_dir / f"{name}.json").read_text())
        meta_path = measurements_dir / f"{name}.meta.json"
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        report = REPORTS[name](measurements) if name in REPORTS else _table(_rows(measurements))
        note = [NOTES[name], ""] if name in NOTES else []
        lines += ["", f"## {TITLES.get(name, name)}", "", *note, *_where(meta, measurements),
                  f"- Measurements: [`docs/measurements/{name}.json`](measurements/{name}.json)", "",
                  "```text", report.rstrip(), "```"]
    if not names:
        lines += ["", "No measurement has been recorded yet."]
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.report_docs", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rendering = sub.add_parser("render", help="print the performance page")
    rendering.add_argument("--measurements", type=Path, default=MEASUREMENTS_DIR, metavar="DIR",
                           help="the JSON files (default: docs/measurements/)")
    recording = sub.add_parser("record", help="run a benchmark ({json} in it is where it writes) and record "
                                              "its command and machine beside its JSON")
    recording.add_argument("name", help="the measurement's name: the JSON file is <name>.json")
    recording.add_argument("--measurements", type=Path, default=MEASUREMENTS_DIR, metavar="DIR",
                           help="where to write (default: docs/measurements/)")
    recording.add_argument("benchmark", nargs=argparse.REMAINDER, help="-- the benchmark's command line")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "render":
        sys.stdout.write(render_page(args.measurements))
        return 0
    command = args.benchmark[1:] if args.benchmark[:1] == ["--"] else args.benchmark
    if not command or not any("{json}" in part for part in command):
        build_parser().error("record needs the benchmark's command after --, with {json} where it writes its JSON")
    return record(args.name, command, args.measurements)


if __name__ == "__main__":
    sys.exit(main())
