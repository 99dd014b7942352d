"""``make down``: stop whichever backend ``make up`` started, from ``stack.json``.

- embedded: SIGTERM to the ``make up`` process the state names, which stops
  the export under way and the server; then waits for it to exit. A pid is
  signalled only while it is the very process ``make up`` recorded: its start
  time (``/proc/PID/stat``) must still match (``serving.stack.identity``), so
  a reused pid, another checkout's ``make up`` included, is never touched.
  A server left by a ``make up`` that was killed (recorded the same way) is
  stopped too. Where the recorded ports answer and no recorded process runs,
  it says that something else holds them and stops nothing.
- compose: ``compose down`` of the files, profiles and project recorded
  (``serving.stack.compose.compose_down``).

Idempotent: where nothing runs it says so and exits 0. A ``stack.json`` that
is not a stack record exits 2 and says what to check; it is never read as
"nothing runs". The state file stays: ``serving.config`` and the next ``make
up`` read it (removed models, pending exports).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from serving.config.served_config import STATE_FILE, StackState, StateFileError, load_state
from serving.stack.compose import compose_down
from serving.stack.running import corrupt_state_advice, embedded_processes, held_ports

__all__ = ["stop_embedded", "stop_stack"]


def stop_embedded(state: StackState, timeout: float = 60.0) -> int:
    """SIGTERM to the embedded stack's ``make up`` (else an orphaned server it recorded) and wait for it
    to exit; 0 when stopped or nothing runs."""
    running = embedded_processes(state)
    if not running:
        held = held_ports(state)
        if held:
            print(f"make down: nothing this stack recorded runs (make up pid {state.pid}), but "
                  f"{', '.join(held)} answers: another process holds it; not stopped", flush=True)
        else:
            print(f"make down: nothing runs: the embedded stack's make up (pid {state.pid}) is not running",
                  flush=True)
        return 0
    role, process = running[0]
    print(f"make down: stopping the embedded stack ({role}, pid {process.pid}; its server on {state.grpc})",
          flush=True)
    process.terminate()
    deadline = time.monotonic() + timeout
    while any(p.alive() for _, p in running):
        if time.monotonic() > deadline:
            print(f"make down: pid {process.pid} still runs after {timeout:.0f} s (kill {process.pid})", flush=True)
            return 1
        if not process.alive():  # make up is gone: its server gets the signal too, if it stayed
            for _, other in running:
                other.terminate()
        time.sleep(0.2)
    print("make down: stopped; the models, the served config and stack.json stay", flush=True)
    return 0


def stop_stack(work_dir: Path) -> int:
    """Stop what ``work_dir/stack.json`` records; 0 when stopped or nothing runs, 2 when it is corrupt."""
    try:
        state = load_state(work_dir / STATE_FILE)
    except StateFileError as exc:
        print(f"make down: {exc}\n{corrupt_state_advice(work_dir / STATE_FILE)}", file=sys.stderr)
        return 2
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
