"""Commands on the stack ``make up`` recorded: ``logs``, ``run``, ``ps`` (``python -m serving.stack ...``).

Compose needs the files, profiles, project and variables ``make up`` used, or
it reads another stack (or refuses: Grafana's password, the GPU base).
``stack.json`` records them; these commands reuse them, so no one has to run
compose by hand. On the embedded stack, ``logs`` shows its server's log file;
``run`` and ``ps`` are compose-only and say what to do instead.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from serving.config.compose import ComposeError
from serving.config.served_config import STATE_FILE, StackState, StateFileError, load_state
from serving.stack.compose import _compose_base, recorded_env
from serving.stack.embedded import SERVER_LOG
from serving.stack.running import corrupt_state_advice

__all__ = ["recorded_stack", "compose_for", "show_logs", "run_service", "show_services"]


def recorded_stack(work_dir: Path, command: str) -> Optional[StackState]:
    """The stack ``work_dir/stack.json`` records; None after saying why there is none (or it is corrupt)."""
    path = Path(work_dir) / STATE_FILE
    try:
        state = load_state(path)
    except StateFileError as exc:
        print(f"{command}: {exc}\n{corrupt_state_advice(path)}", file=sys.stderr)
        return None
    if state is None:
        print(f"{command}: no {path}: make up writes it (nothing was started from this work dir)", file=sys.stderr)
    return state


def compose_for(state: StackState, *args: str) -> list[str]:
    """The compose command line ``args`` for the recorded stack (its files, profiles and project)."""
    return [*_compose_base(state.compose_files, state.compose_profiles, state.compose_project), *args]


def _run(state: StackState, cmd: list[str]) -> int:
    print("+", shlex.join(cmd), flush=True)
    try:
        return subprocess.run(cmd, env=recorded_env(state, os.environ)).returncode
    except KeyboardInterrupt:
        return 130


def show_logs(work_dir: Path, services: Sequence[str], *, follow: bool = False, tail: Optional[int] = None) -> int:
    """The recorded stack's logs: compose's for its services (all, or ``services``); the embedded server's
    log file for the embedded stack."""
    state = recorded_stack(work_dir, "logs")
    if state is None:
        return 2
    if state.backend == "embedded":
        return _embedded_log(Path(work_dir) / SERVER_LOG, follow=follow, tail=tail)
    if not state.compose_files:
        print(f"logs: {Path(work_dir) / STATE_FILE} has no compose files (an older make up wrote it): "
              "make up again", file=sys.stderr)
        return 2
    args = ["logs", "--no-color"] + (["--follow"] if follow else []) + ([f"--tail={tail}"] if tail else [])
    return _run(state, compose_for(state, *args, *services))


def _embedded_log(path: Path, *, follow: bool, tail: Optional[int]) -> int:
    if not path.is_file():
        print(f"logs: no {path}: the embedded server logs there unless make up ran with VERBOSE=1 "
              "(then its log went to make up's terminal)", file=sys.stderr)
        return 2
    lines = path.read_text(errors="replace").splitlines(keepends=True)
    sys.stdout.writelines(lines[-tail:] if tail else lines)
    sys.stdout.flush()
    if not follow:
        return 0
    with open(path, errors="replace") as log:
        log.seek(0, os.SEEK_END)
        try:
            while True:
                line = log.readline()
                if line:
                    sys.stdout.write(line)
                    sys.stdout.flush()
                else:
                    time.sleep(0.5)  # a file has no event to wait on portably; this is a terminal tail
        except KeyboardInterrupt:
            return 0


def run_service(work_dir: Path, service: str, args: Sequence[str]) -> int:
    """``compose run --rm SERVICE ARGS`` on the recorded compose stack (e.g. an export in the exporter's
    image, with the stack's model repository and user)."""
    state = recorded_stack(work_dir, "run")
    if state is None:
        return 2
    if not state.compose_files:
        print(f"run: the recorded stack is the {state.backend} stack, which has no containers; run the command "
              "on this host instead (e.g. python -m exporter export --model NAME)", file=sys.stderr)
        return 2
    return _run(state, compose_for(state, "run", "--rm", service, *args))


def show_services(work_dir: Path) -> int:
    """``compose ps`` of the recorded compose stack (every container, its state and health)."""
    state = recorded_stack(work_dir, "ps")
    if state is None:
        return 2
    if not state.compose_files:
        print(f"ps: the recorded stack is the {state.backend} stack (make up pid {state.pid}): no containers",
              file=sys.stderr)
        return 0
    try:
        return _run(state, compose_for(state, "ps", "--all"))
    except ComposeError as exc:
        print(f"ps: {exc}", file=sys.stderr)
        return 1
