"""`make up` / `make down` trust what runs, not what stack.json says: real processes, no engine.

- make down signals a recorded pid only while its start time still matches: a decoy whose argv holds
  `serving.stack` under a reused pid (or an older record without a start time) is never touched;
- a corrupt stack.json exits 2 with what to do, for make up and make down alike, never "nothing runs";
- a second make up over a running stack (its make up alive, or the work dir's lock held, or the ports in
  use) is refused before it writes anything;
- a child started with die_with_parent() dies with its parent, even when the parent is SIGKILLed.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from serving.checkout import REPO_ROOT
from serving.config.served_config import STATE_FILE, StackState, load_state, write_state
from serving.stack.identity import ProcessIdentity, start_time
from serving.stack.work_lock import WorkDirBusy, WorkDirLock
from tests.support.ports import free_port

# A process that says "ready" once its SIGTERM handler is set, then waits for a signal; exit 7 on SIGTERM.
WAITER = ("import signal, sys, time\n"
          "signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))\n"
          "print('ready', flush=True)\n"
          "while True: time.sleep(3600)\n")


def _waiter(*argv: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", WAITER, *argv], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    return proc


def _stack(cli: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "serving.stack", cli, *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)


def _state(tmp_path: Path, pid: int, pid_start, **extra) -> StackState:
    return StackState("embedded", tmp_path / "models.config", f"127.0.0.1:{free_port()}",
                      f"http://127.0.0.1:{free_port()}", tmp_path, pid=pid, pid_start=pid_start, **extra)


@pytest.fixture
def decoy():
    """A live process whose argv holds `serving.stack` (as another checkout's make up's would)."""
    proc = _waiter("-m", "serving.stack", "up", "--work-dir", "/elsewhere")
    yield proc
    proc.kill()
    proc.wait()


def test_down_leaves_a_decoy_with_a_reused_pid_alone(tmp_path, decoy):
    """The record names the decoy's pid with another start time (the pid was reused): not signalled.
    Before: make down SIGTERMed any live pid whose argv held serving.stack."""
    write_state(_state(tmp_path, decoy.pid, start_time(decoy.pid) - 1), tmp_path / STATE_FILE)
    down = _stack("down", "--work-dir", str(tmp_path))
    assert (down.returncode, decoy.poll()) == (0, None), down.stdout + down.stderr
    assert "nothing runs" in down.stdout


def test_down_leaves_a_pid_recorded_without_its_start_time_alone(tmp_path, decoy):
    write_state(_state(tmp_path, decoy.pid, None), tmp_path / STATE_FILE)
    down = _stack("down", "--work-dir", str(tmp_path))
    assert (down.returncode, decoy.poll()) == (0, None), down.stdout + down.stderr


def test_down_stops_the_recorded_process_when_its_start_time_matches(tmp_path, decoy):
    write_state(_state(tmp_path, decoy.pid, start_time(decoy.pid)), tmp_path / STATE_FILE)
    down = _stack("down", "--work-dir", str(tmp_path))
    assert down.returncode == 0, down.stdout + down.stderr
    assert decoy.wait(30) == 7  # its SIGTERM handler ran
    assert "make down: stopped" in down.stdout


def test_down_stops_a_server_its_killed_make_up_left(tmp_path, decoy):
    """make up is gone (pid of an exited process), its recorded server still runs: stopped."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    write_state(_state(tmp_path, gone.pid, 1, server_pid=decoy.pid, server_start=start_time(decoy.pid)),
                tmp_path / STATE_FILE)
    down = _stack("down", "--work-dir", str(tmp_path))
    assert down.returncode == 0, down.stdout + down.stderr
    assert decoy.wait(30) == 7
    assert f"its server, pid {decoy.pid}" in down.stdout


@pytest.mark.parametrize("content", ['{"backend": "embedded", "pid"', "[]", '{"backend": "embedded"}',
                                     '{"backend": "embedded", "models_config": "m", "grpc": "g", "rest": "r", '
                                     '"model_repo": "x", "pid": "123"}'])
@pytest.mark.parametrize("command", ["down", "up"])
def test_a_corrupt_stack_json_exits_2_and_says_what_to_do(tmp_path, content, command):
    """Before: make down said "nothing runs" (exit 0) and make up started over whatever ran."""
    (tmp_path / STATE_FILE).write_text(content)
    args = ["--work-dir", str(tmp_path)] + (["--backend", "embedded"] if command == "up" else [])
    proc = _stack(command, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"make {command}: {tmp_path / STATE_FILE}: " in proc.stderr
    assert "It cannot say what runs" in proc.stderr and "Traceback" not in proc.stderr
    assert (tmp_path / STATE_FILE).read_text() == content  # left as it was


def test_a_second_make_up_is_refused_while_the_recorded_make_up_runs(tmp_path, decoy):
    """Before: the second make up overwrote stack.json, reported the first server's models, died on the port."""
    state = _state(tmp_path, decoy.pid, start_time(decoy.pid))
    write_state(state, tmp_path / STATE_FILE)
    before = (tmp_path / STATE_FILE).read_text()
    up = _stack("up", "--backend", "embedded", "--work-dir", str(tmp_path), "--grpc", f"127.0.0.1:{free_port()}",
                "--rest", f"http://127.0.0.1:{free_port()}")
    assert up.returncode == 1, up.stdout + up.stderr
    assert f"the embedded stack (make up pid {decoy.pid}; gRPC {state.grpc}" in up.stderr
    assert "make down stops it" in up.stderr
    assert (tmp_path / STATE_FILE).read_text() == before


def test_a_second_make_up_is_refused_while_another_holds_the_work_dir(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from serving.stack.work_lock import WorkDirLock\n"
                               f"WorkDirLock({str(tmp_path)!r}).acquire(); print('locked', flush=True); sys.stdin.read()"],
                              cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        up = _stack("up", "--backend", "embedded", "--work-dir", str(tmp_path))
        assert up.returncode == 1, up.stdout + up.stderr
        assert f"another make up (pid {holder.pid}) holds {tmp_path}/make-up.lock" in up.stderr
        assert not (tmp_path / STATE_FILE).exists()
        with pytest.raises(WorkDirBusy):
            WorkDirLock(tmp_path).acquire()
    finally:
        holder.stdin.close()
        holder.wait(30)
    # The holder is gone: the kernel dropped its lock.
    WorkDirLock(tmp_path).acquire().release()


def test_make_up_is_refused_on_ports_another_process_holds(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        up = _stack("up", "--backend", "embedded", "--work-dir", str(tmp_path), "--grpc", f"127.0.0.1:{port}",
                    "--rest", f"http://127.0.0.1:{free_port()}")
    assert up.returncode == 1, up.stdout + up.stderr
    assert f"port {port} (127.0.0.1:{port}) already in use" in up.stderr
    assert not (tmp_path / STATE_FILE).exists()


def test_a_child_started_with_die_with_parent_dies_when_its_parent_is_killed():
    """The parent is SIGKILLed (no handler runs); the kernel sends the child SIGTERM."""
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys\nfrom serving.stack.identity import die_with_parent\n"
         f"child = subprocess.Popen([sys.executable, '-c', {WAITER!r}], preexec_fn=die_with_parent())\n"
         "print(child.pid, flush=True)\nchild.wait()"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    child = ProcessIdentity.of(int(parent.stdout.readline()))
    assert child is not None and child.alive()
    parent.send_signal(signal.SIGKILL)
    parent.wait(30)
    deadline = time.monotonic() + 30
    while child.alive() and time.monotonic() < deadline:
        time.sleep(0.05)  # a poll of /proc, bounded: there is no event to wait on for another's child
    assert not child.alive()


def test_the_state_records_the_start_time_and_reads_back(tmp_path):
    me = ProcessIdentity.of(os.getpid())
    state = _state(tmp_path, me.pid, me.start, server_pid=me.pid, server_start=me.start)
    write_state(state, tmp_path / STATE_FILE)
    assert load_state(tmp_path / STATE_FILE) == state
    assert load_state(tmp_path / "absent.json") is None


@pytest.mark.slow
def test_a_killed_make_up_takes_its_server_with_it_and_a_new_make_up_starts(model_repo, tmp_path):
    """SIGKILL of the embedded make up: its server gets SIGTERM from the kernel and frees the ports, so
    make down says nothing runs and is right, and the next make up on the same ports starts.
    Before: the server ran on, make down said "nothing runs" and nothing could stop it."""
    from tests.support.processes import MakeUpEmbedded

    repo = tmp_path / "models"
    shutil.copytree(model_repo / "digits", repo / "digits")
    work, grpc, rest = tmp_path / "work", f"127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    first = MakeUpEmbedded(repo, work, grpc, rest, tmp_path / "up1.log", 300)
    first.start(lambda: "every model is loaded" in first.text(), "make up", 400, every=0.5)
    server = ProcessIdentity(load_state(work / STATE_FILE).server_pid, load_state(work / STATE_FILE).server_start)
    assert server.alive()
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(30)
    deadline = time.monotonic() + 60
    while server.alive() and time.monotonic() < deadline:
        time.sleep(0.1)  # bounded poll of /proc: the server is not our child
    assert not server.alive()
    down = _stack("down", "--work-dir", str(work))
    assert (down.returncode, "nothing runs" in down.stdout) == (0, True), down.stdout
    second = MakeUpEmbedded(repo, work, grpc, rest, tmp_path / "up2.log", 300)
    second.start(lambda: "every model is loaded" in second.text(), "make up", 400, every=0.5)
    try:
        assert "make down: stopped" in _stack("down", "--work-dir", str(work)).stdout
        assert second.proc.wait(60) == 0
    finally:
        second.stop(60)
