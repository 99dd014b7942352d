"""A version whose warmup kills the process is quarantined by its crash marker: one restart, then the rest serve.

The fast tests drive ``core.quarantine`` and the source with real files and real
(dead and live) processes; the slow one runs real server processes on a real
SavedModel whose warmup calls ``tf.raw_ops.Abort`` (``tests.support.crashing_model``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from serving import status
from serving.server.core.quarantine import QuarantiningLoaderFactory, VersionQuarantine, VersionQuarantined
from serving.server.core.retrier import retry
from serving.server.core.source import FileSystemSource, ServableToMonitor
from serving.launcher import ServerProcess


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _marker(directory: Path, name: str, version: int, path: str, pid: int, start) -> Path:
    from serving.server.core.quarantine import _key  # the marker's file name, as the server writes it

    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / f"loading-{_key(name, version, path)}.json"
    marker.write_text(json.dumps({"name": name, "version": version, "path": path, "pid": pid,
                                  "pid_start": start, "since": "2026-01-01T00:00:00Z"}))
    return marker


def test_a_marker_left_by_a_dead_process_quarantines_that_version_only(tmp_path):
    _marker(tmp_path / "q", "m", 2, "/models/m/2", _dead_pid(), 1)
    quarantine = VersionQuarantine(str(tmp_path / "q"))
    [record] = quarantine.open()
    assert (record.name, record.version) == ("m", 2)
    assert quarantine.is_quarantined("m", 2, "/models/m/2")
    assert not quarantine.is_quarantined("m", 1, "/models/m/1")
    with pytest.raises(VersionQuarantined) as refused:
        quarantine.refuse("m", 2, "/models/m/2")
    assert refused.value.code is status.Code.FAILED_PRECONDITION
    assert "quarantined" in refused.value.details and "python -m serving.server.quarantine" in refused.value.details


def test_a_marker_of_a_live_server_process_is_not_taken_for_a_crash(tmp_path):
    from serving.server.core.quarantine import process_start_ticks

    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as live:
        try:
            _marker(tmp_path / "q", "m", 2, "/models/m/2", live.pid, process_start_ticks(live.pid))
            assert VersionQuarantine(str(tmp_path / "q")).open() == []
        finally:
            live.kill()


def test_a_load_leaves_no_marker_whether_it_succeeds_or_fails(tmp_path):
    quarantine = VersionQuarantine(str(tmp_path / "q"))
    quarantine.open()
    seen = []

    class Loader:
        def estimate_resources(self): return 0
        def load(self):
            seen.append(sorted(os.listdir(tmp_path / "q")))
            raise status.Internal("a load error is not a crash")
        def unload(self): pass
        def servable(self): return None

    loader = QuarantiningLoaderFactory(lambda *_: Loader(), quarantine)("m", 1, "/models/m/1")
    with pytest.raises(status.Internal):
        loader.load()
    assert len(seen[0]) == 1 and seen[0][0].startswith("loading-")
    assert os.listdir(tmp_path / "q") == []


def test_a_quarantined_load_is_not_retried():
    calls = []

    def load():
        calls.append(1)
        raise VersionQuarantined("quarantined")

    with pytest.raises(VersionQuarantined):
        retry("Loading servable: m", 5, 0, load, threading.Event())
    assert calls == [1]


def test_the_source_aspires_the_previous_version_beside_a_quarantined_newest(tmp_path):
    for version in (1, 2, 3):
        (tmp_path / "m" / str(version)).mkdir(parents=True)
    bad = str(tmp_path / "m" / "3")
    got = []
    source = FileSystemSource(lambda name, versions: got.append([v.version for v in versions]), 0,
                              quarantined=lambda name, version, path: path == bad)
    source.set_servables([ServableToMonitor("m", str(tmp_path / "m"))])
    assert got == [[3, 2]]


def test_the_operator_command_lists_and_clears_a_quarantined_version(tmp_path, capsys):
    from serving.server.quarantine import main

    _marker(tmp_path / "q", "m", 2, "/models/m/2", _dead_pid(), 1)
    VersionQuarantine(str(tmp_path / "q")).open()
    directory = f"--quarantine_dir={tmp_path / 'q'}"
    assert main([directory, "list"]) == 0
    assert capsys.readouterr().out.startswith("m\t2\t/models/m/2")
    assert main([directory, "clear", "m", "2"]) == 0
    assert "cleared version 2 of model m" in capsys.readouterr().out
    assert main([directory, "list"]) == 0 and capsys.readouterr().out == ""
    assert main([directory, "clear", "m", "2"]) == 1


# -- real server processes ------------------------------------------------------------------------------------


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.load(answer)


class _GoodTraffic:
    """Predicts on the good model, one after another, until stopped: how many were answered and how many failed."""

    def __init__(self, rest_url: str) -> None:
        self.url = rest_url + "/v1/models/good:predict"
        self.ok = self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        body = json.dumps({"instances": [[1.0, 2.0, 3.0]]}).encode()
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(urllib.request.Request(self.url, body), timeout=5) as answer:
                    answer.read()
                self.ok += 1
            except (urllib.error.URLError, OSError):
                self.failed += 1
                self._stop.wait(0.05)

    def __enter__(self) -> "_GoodTraffic":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.slow   # exports a model and starts three server processes
def test_a_version_whose_warmup_aborts_kills_one_process_then_is_quarantined(tmp_path):
    from tests.support.crashing_model import export_aborting
    from tests.support.models import export_tiny

    export_tiny(tmp_path / "models" / "good" / "1")
    export_tiny(tmp_path / "models" / "bad" / "1")
    export_aborting(tmp_path / "staging-bad-2")
    quarantine_dir = tmp_path / "quarantine"
    first = ServerProcess.for_models({"good": tmp_path / "models" / "good", "bad": tmp_path / "models" / "bad"},
                                     workdir=tmp_path / "work",
                                     extra_flags=["--file_system_poll_wait_seconds=1",
                                                  f"--quarantine_dir={quarantine_dir}"])
    first.start()
    with _GoodTraffic(first.rest_url) as traffic:
        os.rename(tmp_path / "staging-bad-2", tmp_path / "models" / "bad" / "2")   # the bad publish
        assert first.wait(timeout=120) != 0   # its warmup aborts the whole process
        crashed_at = time.monotonic()
        # The restart policy: the same command line again.
        second = ServerProcess(first.args[2:], wait_for=["good", "bad"], grpc_port=first.grpc_port,
                               rest_port=first.rest_port, log_path=tmp_path / "second.log", timeout=120)
        second.start()
        back_after = time.monotonic() - crashed_at
        try:
            statuses = {v["version"]: v for v in _get(second.rest_url + "/v1/models/bad")["model_version_status"]}
            assert statuses["1"]["state"] == "AVAILABLE"
            assert statuses["2"]["state"] == "END"
            assert statuses["2"]["status"]["error_code"] == "FAILED_PRECONDITION"
            assert "quarantined" in statuses["2"]["status"]["error_message"]
            assert _get(second.rest_url + "/v1/models/good")["model_version_status"][0]["state"] == "AVAILABLE"
            with urllib.request.urlopen(second.metrics_url, timeout=5) as page:
                assert 'quarantined_versions{model_name="bad",model_version="2"} 1' in page.read().decode()
            assert "QUARANTINED" in second.log_tail(400)
            time.sleep(1.0)   # a few good requests against the restarted server
        finally:
            served_after = traffic.ok
            second.stop()
    print(f"\ngood requests: {traffic.ok} answered, {traffic.failed} failed (connection refused while no "
          f"process served, {back_after:.1f} s from crash to the restart serving)")
    assert served_after > 0


@pytest.mark.slow   # exports a model and starts two server processes
def test_a_first_start_killed_by_its_only_version_restarts_serving_the_other_models(tmp_path):
    from tests.support.crashing_model import export_aborting
    from tests.support.models import export_tiny

    export_tiny(tmp_path / "models" / "good" / "1")
    export_aborting(tmp_path / "models" / "bad" / "1")
    flags = [f"--quarantine_dir={tmp_path / 'quarantine'}"]
    first = ServerProcess.for_models({"good": tmp_path / "models" / "good", "bad": tmp_path / "models" / "bad"},
                                     workdir=tmp_path / "work", extra_flags=flags)
    first.launch()
    assert first.wait(timeout=120) == -6   # SIGABRT, in the first start's warmup
    with ServerProcess(first.args[2:], wait_for=["good"], log_path=tmp_path / "second.log", timeout=120) as second:
        [bad] = _get(second.rest_url + "/v1/models/bad")["model_version_status"]
        assert (bad["version"], bad["state"], bad["status"]["error_code"]) == ("1", "END", "FAILED_PRECONDITION")
        assert _get(second.rest_url + "/v1/models/good")["model_version_status"][0]["state"] == "AVAILABLE"


def test_a_wait_for_models_looks_past_quarantined_versions():
    from serving.codec import VersionState
    from serving.server.core.state_monitor import ServableStateMonitor

    condition = threading.Condition()
    monitor = ServableStateMonitor(condition)
    with condition:
        since = monitor.checkpoint()
        monitor.publish("m", 2, VersionState.END, VersionQuarantined("quarantined"))
        monitor.publish("m", 1, VersionState.AVAILABLE)
        monitor.publish("only", 1, VersionState.END, VersionQuarantined("quarantined"))
        monitor.publish("broken", 1, VersionState.END, status.DataLoss("corrupt"))
    with pytest.raises(status.Unknown) as failed:
        monitor.wait_until_models_available(["m", "only", "broken"], since, timeout=5)
    assert "1 model(s) did not become available" in failed.value.details and "broken" in failed.value.details


@pytest.mark.slow   # exports a model and starts two server processes
def test_a_version_without_warmup_whose_first_request_aborts_is_quarantined_at_the_restart(tmp_path):
    from tests.support.crashing_model import export_aborting
    from tests.support.models import export_tiny

    export_tiny(tmp_path / "models" / "good" / "1")
    export_tiny(tmp_path / "models" / "bad" / "1")
    export_aborting(tmp_path / "models" / "bad" / "2", warmup=False)
    flags = [f"--quarantine_dir={tmp_path / 'quarantine'}"]
    first = ServerProcess.for_models({"good": tmp_path / "models" / "good", "bad": tmp_path / "models" / "bad"},
                                     workdir=tmp_path / "work", extra_flags=flags).start()
    body = json.dumps({"instances": [[1.0, 2.0, 3.0]]}).encode()
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(urllib.request.Request(first.rest_url + "/v1/models/bad:predict", body), timeout=30)
    assert first.wait(timeout=60) == -6
    with ServerProcess(first.args[2:], wait_for=["good", "bad"], log_path=tmp_path / "second.log",
                       timeout=120) as second:
        statuses = {v["version"]: v for v in _get(second.rest_url + "/v1/models/bad")["model_version_status"]}
        assert statuses["2"]["status"]["error_code"] == "FAILED_PRECONDITION"
        assert statuses["1"]["state"] == "AVAILABLE"
        with urllib.request.urlopen(urllib.request.Request(second.rest_url + "/v1/models/bad:predict", body),
                                    timeout=30) as answer:
            assert json.load(answer)["predictions"][0]["y"] == [2.0, 4.0, 6.0]   # version 1 answers
