"""docs/performance.md, generated from the JSON files the benchmarks write with ``--json``.

Numbers on the performance page are never pasted by hand: each measurement is a JSON file under
``docs/measurements/`` (``<benchmark>.json``), and the page is this module's output over them.
Each is recorded through ``record``, which runs the benchmark's command and writes
``<benchmark>.meta.json`` beside its JSON (the command, the machine, the 1-minute load average at the
start and at the end, the time and the commit):

    python -m benchmarks.report_docs record peers -- python -m benchmarks.peers --rounds 3 --json {json}
    python -m benchmarks.report_docs render > docs/performance.md

What ``record`` holds a recording to:

- paths: every path it writes is relative to the checkout (``{json}`` becomes
  ``docs/measurements/<name>.json``; a path under the checkout in the benchmark's own JSON is made
  relative, one outside it becomes ``<outside the checkout>/NAME``), so the page names nothing of
  one machine;
- rounds: at least ``MIN_ROUNDS`` (3) interleaved rounds; a command with ``--rounds`` below it, or
  ``--quick``, is refused before it runs;
- load: the 1-minute load average is printed at the start and the end and goes into the page; above
  ``--max-load`` (default ``LOAD_PER_CORE`` = 0.75 per usable core: 1.5 on 2 cores) at the start,
  ``record`` refuses to run (exit 2) unless ``--busy-ok``, and then the page says plainly "Recorded
  on a busy machine". A measurement whose meta is missing, or has too few rounds, is marked too.

``tests/readme/test_performance_page.py`` holds the committed page equal to ``render``'s output.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path, PurePosixPath
from typing import Callable, Optional, Sequence

from benchmarks.peers import Measurements, render
from serving.checkout import REPO_ROOT

__all__ = ["MEASUREMENTS_DIR", "MIN_ROUNDS", "LOAD_PER_CORE", "build_parser", "machine", "main", "record",
           "render_page", "relative_paths", "load_threshold", "recorded_rounds"]

MEASUREMENTS_DIR = REPO_ROOT / "docs" / "measurements"
PAGE = "docs/performance.md"
MIN_ROUNDS = 3
LOAD_PER_CORE = 0.75   # the 1-minute load average per usable core above which a machine is busy (1.5 on 2 cores)
OUTSIDE = "<outside the checkout>"
# An absolute path of a machine: under one of the roots a checkout, a temp dir or a home lives in, or under
# the checkout's own top directory (added per call).
_ROOTS = ("tmp", "work", "root", "home", "var", "mnt", "opt", "srv", "usr", "private")
_PATH_TAIL = r"(?:/[^\s'\"`;,)]*)?"

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
(the 1-minute load average is given at the start and the end, and a recording on a busy machine, or
with fewer than three rounds, says so). The embedded server is not TF Serving:
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


def load_threshold(cores: int, max_load: Optional[float] = None) -> float:
    """``max_load``, or ``LOAD_PER_CORE`` per usable core."""
    return max_load if max_load is not None else LOAD_PER_CORE * max(1, cores)


def _relative_text(text: str, root: Path) -> str:
    # The checkout first, wherever it is (a CI runner's may sit under a root the general pattern does not
    # know), then every other absolute path under a well-known root.
    inside = re.compile(r"(?<![\w.~:/-])" + re.escape(PurePosixPath(root).as_posix()) + r"(?![\w.-])(?:/([^\s'\"`;,)]*))?")
    text = inside.sub(lambda match: match.group(1) or ".", text)

    def one(match: re.Match) -> str:
        path = PurePosixPath(match.group(0))
        try:
            return path.relative_to(PurePosixPath(root)).as_posix() or "."
        except ValueError:
            return f"{OUTSIDE}/{path.name}"
    roots = sorted(set(_ROOTS) | set(PurePosixPath(root).parts[1:2]))
    absolute = re.compile(r"(?<![\w.~:/-])/(?:" + "|".join(map(re.escape, roots)) + r")(?![\w.-])" + _PATH_TAIL)
    return absolute.sub(one, text)


def relative_paths(value: object, root: Path = REPO_ROOT) -> object:
    """``value`` (JSON) with every absolute path in its strings made relative to ``root``, or, outside it,
    ``<outside the checkout>/NAME``."""
    if isinstance(value, str):
        return _relative_text(value, root)
    if isinstance(value, list):
        return [relative_paths(item, root) for item in value]
    if isinstance(value, dict):
        return {relative_paths(key, root): relative_paths(item, root) for key, item in value.items()}
    return value


def recorded_rounds(measurements: object) -> Optional[int]:
    """How many rounds a benchmark's JSON holds: ``settings.rounds`` (``benchmarks.peers``), or the fewest
    rounds of a level (``benchmarks.runner.to_json``); None when it does not say."""
    if not isinstance(measurements, dict):
        return None
    rounds = measurements.get("settings", {}).get("rounds")
    if isinstance(rounds, int):
        return rounds
    counts = [len(level["rounds"]) for series in measurements.get("series", []) if isinstance(series, dict)
              for level in series.get("levels", []) if isinstance(level.get("rounds"), list)]
    return min(counts) if counts else None


def _refusal(command: Sequence[str], min_rounds: int) -> Optional[str]:
    """Why ``command`` cannot make a recording (too few rounds), or None."""
    if "--quick" in command:
        return "--quick runs a single short round; a recording needs at least %d rounds" % min_rounds
    for index, part in enumerate(command):
        value = part.split("=", 1)[1] if part.startswith("--rounds=") else (
            command[index + 1] if part == "--rounds" and index + 1 < len(command) else None)
        if value is not None and (not value.isdigit() or int(value) < min_rounds):
            return f"--rounds {value}: a recording needs at least {min_rounds} interleaved rounds"
    return None


def _commit() -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
    return result.stdout.strip() or "?"


def record(name: str, command: Sequence[str], out_dir: Path = MEASUREMENTS_DIR, *,
           max_load: Optional[float] = None, busy_ok: bool = False, min_rounds: int = MIN_ROUNDS,
           load: Callable[[], float] = lambda: os.getloadavg()[0]) -> int:
    """Run ``command`` (``{json}`` in it becomes ``<out_dir>/<name>.json``) and write ``<name>.meta.json``.

    Refused (2, nothing run or written) with fewer than ``min_rounds`` rounds, or when the 1-minute
    ``load()`` at the start is above ``load_threshold`` unless ``busy_ok`` (the meta then says ``busy``).
    Paths written are relative to the checkout (:func:`relative_paths`); a command starting with ``python`` runs
    on this interpreter. The benchmark's exit status otherwise.
    """
    about = machine()
    threshold = load_threshold(about["cores"], max_load)
    refusal = _refusal(command, min_rounds)
    if refusal is not None:
        print(f"record: refused: {refusal}", file=sys.stderr)
        return 2
    load_before = load()
    print(f"record: 1-minute load average at start: {load_before:.2f} (busy above {threshold:.2f})", flush=True)
    busy = load_before > threshold
    if busy and not busy_ok:
        print(f"record: refused: the machine is busy (1-minute load average {load_before:.2f} > {threshold:.2f}: "
              f"{LOAD_PER_CORE} per core, or --max-load); re-run when it is quiet, or pass --busy-ok to record "
              "a page marked \"Recorded on a busy machine\"", file=sys.stderr)
        return 2
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{name}.json"
    shown = json_path.relative_to(REPO_ROOT) if json_path.is_relative_to(REPO_ROOT) else json_path
    argv = [part.replace("{json}", str(shown)) for part in command]
    meta_command = " ".join(str(relative_paths(part)) for part in argv)
    if argv and argv[0] in ("python", "python3"):   # this interpreter (the venv's), whatever PATH finds first
        argv[0] = sys.executable
    where = {**about, "load_before": load_before}
    meta = {"command": meta_command, "machine": where,
            "load_threshold": threshold, "busy": busy,
            "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "commit": _commit()}
    returncode = subprocess.run(argv, cwd=REPO_ROOT).returncode
    where["load_after"] = load_after = load()
    print(f"record: 1-minute load average at end: {load_after:.2f}", flush=True)
    meta["exit_status"] = returncode
    if json_path.exists():
        measurements = relative_paths(json.loads(json_path.read_text()))
        json_path.write_text(json.dumps(measurements, indent=1) + "\n")
        meta["rounds"] = recorded_rounds(measurements)
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
                 f"at the start, {_load(where.get('load_after'))} at the end")
    return lines + _warnings(meta, measurements, where)


def _warnings(meta: dict, measurements: object, where: dict) -> list[str]:
    """What makes a recording's ratios doubtful, said plainly: a busy machine, too few rounds, no record."""
    lines = []
    threshold = meta.get("load_threshold") or load_threshold(int(where.get("cores") or 1))
    load_before = where.get("load_before")
    if meta.get("busy") or (load_before is not None and load_before > threshold):
        lines.append(f"- **Recorded on a busy machine**: the 1-minute load average was {_load(load_before)} at "
                     f"the start, above {threshold:.2f} ({LOAD_PER_CORE} per core); other work shared the CPU, so "
                     "even the ratios may be off. Re-record on a quiet machine.")
    rounds = recorded_rounds(measurements)
    if rounds is not None and rounds < MIN_ROUNDS:
        lines.append(f"- **{rounds} round{'s' if rounds != 1 else ''} only** (a recording needs {MIN_ROUNDS}): "
                     "one round's noise is not averaged out.")
    if not meta:
        lines.append("- **Not recorded through `python -m benchmarks.report_docs record`**: no record of the "
                     "time, the commit or the exit status.")
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
    recording.add_argument("--max-load", type=float, default=None, metavar="LOAD",
                           help="the 1-minute load average above which the machine is busy (default: "
                                f"{LOAD_PER_CORE} per usable core)")
    recording.add_argument("--busy-ok", action="store_true",
                           help="record on a busy machine anyway; the page then says \"Recorded on a busy machine\"")
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
    return record(args.name, command, args.measurements, max_load=args.max_load, busy_ok=args.busy_ok)


if __name__ == "__main__":
    sys.exit(main())
