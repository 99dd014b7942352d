"""``make down``: stop whichever backend ``make up`` started, from ``stack.json``.

- embedded: SIGTERM to the ``make up`` process the state names (its
  ``pid``, checked to be a ``serving.stack`` process, so a reused pid is left
  alone), which stops the export under way and the server; then waits for it
  to exit.
- compose: ``compose down`` of the files, profiles and project recorded
  (``serving.stack.compose.compose_down``).

Idempotent: where nothing runs it says so and exits 0. The state file stays:
``serving.config`` and the next ``make up`` read it (removed models, pending
exports).
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Optional

from serving.config.stack import STATE_FILE, StackState, read_state
from serving.stack.compose import compose_down

__all__ = ["stack_process_alive", "stop_embedded", "stop_stack"]


def stack_process_alive(pid: Optional[int]) -> bool:
    """Whether ``pid`` is a running ``make up`` (a ``serving.stack`` Python process), read from ``/proc``."""
    if not pid:
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and b"serving.stack" in argv


def stop_embedded(state: StackState, timeout: float = 60.0) -> int:
    """SIGTERM to the embedded stack's ``make up`` and wait for it to exit; 0 when nothing runs."""
    if not stack_process_alive(state.pid):
        print(f"make down: nothing runs: the embedded stack's make up (pid {state.pid}) is not running", flush=True)
        return 0
    print(f"make down: stopping the embedded stack (make up, pid {state.pid}; its server on {state.grpc})",
          flush=True)
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while stack_process_alive(state.pid):
        if time.monotonic() > deadline:
            print(f"make down: pid {state.pid} still runs after {timeout:.0f} s (kill {state.pid})", flush=True)
            return 1
        time.sleep(0.2)
    print("make down: stopped; the models, the served config and stack.json stay", flush=True)
    return 0


def stop_stack(work_dir: Path) -> int:
    """Stop what ``work_dir/stack.json`` records; 0 when stopped or nothing runs."""
    state = read_state(work_dir / STATE_FILE)
    if state is None:
        print(f"make down: nothing runs: no {work_dir / STATE_FILE} (make up writes it)", flush=True)
        return 0
    if state.backend == "embedded":
        return stop_embedded(state)
    if not state.compose_files:
        print(f"make down: {work_dir / STATE_FILE} names the {state.backend} stack without its compose files "
              "(an older make up wrote it): docker compose down in the checkout stops it", flush=True)
        return 1
    return compose_down(state)
