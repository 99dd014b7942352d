"""``serving.processes.stop_process`` on real child processes: the signal, the bounded wait, the kill; and the
fixtures' ``tests.support.processes.LoggedProcess`` built on it."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from serving.processes import stop_process
from tests.support.processes import LoggedProcess

# A child that says "ready" once its SIGTERM handler is set: ignore it, or exit with status 3.
_CHILD = """
import signal, sys, threading
signal.signal(signal.SIGTERM, {handler})
print("ready", flush=True)
threading.Event().wait()
"""
_IGNORES = _CHILD.format(handler="signal.SIG_IGN")
_EXITS_3 = _CHILD.format(handler="lambda *_: sys.exit(3)")
# A child whose own child ignores SIGTERM too and holds the same stdout: EOF on it means both are gone.
_WITH_GRANDCHILD = f"""
import subprocess, sys
subprocess.Popen([sys.executable, "-c", {_IGNORES!r}], stdout=sys.stdout)
{_IGNORES}
"""


def _started(code: str, **kwargs) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, **kwargs)
    assert proc.stdout.readline() == "ready\n"
    return proc


def test_a_process_that_exits_on_sigterm_gives_its_own_exit_status():
    proc = _started(_EXITS_3)
    assert stop_process(proc, 60) == 3
    proc.stdout.close()


def test_a_process_that_ignores_the_signal_is_killed_after_the_timeout():
    proc = _started(_IGNORES)
    assert stop_process(proc, 0.5) == -signal.SIGKILL
    proc.stdout.close()


def test_the_signal_given_is_the_one_sent():
    proc = _started(_IGNORES)
    assert stop_process(proc, 60, sig=signal.SIGINT) == -signal.SIGINT
    proc.stdout.close()


def test_an_exited_process_gets_no_signal_and_keeps_its_status():
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(5)"])
    proc.wait()
    assert stop_process(proc, 60) == 5


def test_a_group_kill_takes_the_children_too():
    for group in ("kill", "all"):
        proc = subprocess.Popen([sys.executable, "-c", _WITH_GRANDCHILD], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
        assert proc.stdout.readline() == "ready\n" and proc.stdout.readline() == "ready\n"
        assert stop_process(proc, 0.5, group=group) == -signal.SIGKILL
        assert proc.stdout.read() == ""  # EOF: the grandchild, which held the pipe, is gone as well
        proc.stdout.close()


def test_group_all_sends_the_first_signal_to_the_whole_group():
    code = f"""
import subprocess, sys
subprocess.Popen([sys.executable, "-c", {_EXITS_3!r}], stdout=sys.stdout)
{_EXITS_3}
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline() == "ready\n" and proc.stdout.readline() == "ready\n"
    assert stop_process(proc, 60, group="all") == 3
    assert proc.stdout.read() == ""  # the grandchild exited on its own SIGTERM: nothing was killed
    proc.stdout.close()


# ---------------------------------------------------------------- the fixtures' LoggedProcess (tests/support)

def test_a_logged_process_that_exits_before_it_is_ready_fails_with_its_log_tail(tmp_path):
    process = LoggedProcess([sys.executable, "-c", "print('no config here'); raise SystemExit(4)"],
                            tmp_path / "out.log")
    with pytest.raises(AssertionError, match=r"(?s)the tool exited with 4:\nno config here"):
        process.start(lambda: False, "the tool", 60, every=0.01)


def test_a_logged_process_not_ready_in_time_is_stopped(tmp_path):
    process = LoggedProcess([sys.executable, "-c", "import threading; threading.Event().wait()"], tmp_path / "out.log")
    with pytest.raises(AssertionError, match="the tool not ready within 0 s"):
        process.start(lambda: False, "the tool", 0.2, every=0.01)
    assert process.proc.returncode == -signal.SIGTERM


def test_a_logged_process_is_ready_when_its_check_holds_and_keeps_stderr_apart(tmp_path):
    code = "import sys; print('out', flush=True); print('ready', file=sys.stderr, flush=True); sys.stdin.read()"
    process = LoggedProcess([sys.executable, "-c", code], tmp_path / "out.log", stderr_log=tmp_path / "err.log",
                            stdin=subprocess.PIPE)
    process.start(lambda: "ready" in process.text(), "the tool", 60, every=0.01)
    assert process.proc.poll() is None
    assert process.stop(60) == -signal.SIGTERM
    assert (tmp_path / "out.log").read_text() == "out\n"
