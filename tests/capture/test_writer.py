"""CaptureWriter: rotation, .part then rename, modes, budgets, disk errors and threads."""
from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from serving.capture import CaptureWriter, read_capture
from serving.capture._tfrecord import frame
from tests.capture.records import predict_log

RECORD = len(frame(predict_log("r000").SerializeToString()))


class Clock:
    def __init__(self, now: float = 1_767_225_600.0):  # 2026-01-01T00:00:00Z
        self.now = now

    def __call__(self) -> float:
        return self.now


def _writer(directory: Path, clock: Clock | None = None, **overrides) -> CaptureWriter:
    settings = {"origin": "embedded-server", "max_file_bytes": 1 << 20, "max_file_seconds": 3600,
                    "max_total_bytes": 1 << 30, "setting_names": {"max_total_bytes": "--request_capture_max_bytes"}}
    settings.update(overrides)
    return CaptureWriter(directory, clock=clock or Clock(), **settings)


def _ids(directory: Path, **kw) -> list[str]:
    return [r.request_id for r in read_capture(directory, **kw)]


def test_file_is_part_while_open_then_renamed_with_mode_0600_in_a_0700_directory(tmp_path: Path):
    directory = tmp_path / "capture" / "new"
    writer = _writer(directory)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert writer.write(predict_log("r000"))
    (part,) = directory.iterdir()
    assert part.name == "capture-embedded-server-20260101T000000Z-000001.tfrecord.part"
    assert _ids(directory) == [] and _ids(directory, include_partial=True) == ["r000"]
    writer.close()
    (done,) = directory.iterdir()
    assert done.name == "capture-embedded-server-20260101T000000Z-000001.tfrecord"
    assert stat.S_IMODE(done.stat().st_mode) == 0o600
    assert _ids(directory) == ["r000"]
    assert not writer.write(predict_log("late"))


def test_size_rotation_keeps_each_file_under_max_file_bytes(tmp_path: Path):
    with _writer(tmp_path, max_file_bytes=3 * RECORD) as writer:
        for i in range(10):
            assert writer.write(predict_log(f"r{i:03d}"))
    files = sorted(tmp_path.iterdir())
    assert [f.stat().st_size for f in files] == [3 * RECORD] * 3 + [RECORD]
    assert _ids(tmp_path) == [f"r{i:03d}" for i in range(10)]
    assert writer.stats().files_closed == 4


def test_age_rotation_on_write_and_when_idle(tmp_path: Path):
    clock = Clock()
    writer = _writer(tmp_path, clock, max_file_seconds=60)
    writer.write(predict_log("a"))
    clock.now += 59
    writer.write(predict_log("b"))
    clock.now += 1
    writer.write(predict_log("c"))  # the first file is 60 s old: closed before this record
    assert len(list(tmp_path.glob("*.tfrecord"))) == 1
    clock.now += 60
    writer.rotate_if_due()  # idle: closed without a write
    assert _ids(tmp_path) == ["a", "b", "c"] and not list(tmp_path.glob("*.part"))


def test_a_new_utc_day_starts_a_new_file(tmp_path: Path):
    clock = Clock(1_767_225_600.0 - 1)  # 2025-12-31T23:59:59Z
    with _writer(tmp_path, clock) as writer:
        writer.write(predict_log("old"))
        clock.now += 1
        writer.write(predict_log("new"))
    assert [p.name[24:32] for p in sorted(tmp_path.iterdir())] == ["20251231", "20260101"]


def test_total_budget_stops_capture_logs_once_and_keeps_disk_under_it(tmp_path: Path, caplog):
    budget = 5 * RECORD + RECORD // 2
    caplog.set_level(logging.WARNING, logger="serving.capture")
    with _writer(tmp_path, max_file_bytes=2 * RECORD, max_total_bytes=budget) as writer:
        results = [writer.write(predict_log(f"r{i:03d}")) for i in range(9)]
        stats = writer.stats()
    assert results == [True] * 5 + [False] * 4
    assert (stats.written, stats.dropped_budget, stats.stopped_by) == (5, 4, "max_total_bytes")
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= budget
    stops = [r.getMessage() for r in caplog.records if "stopped" in r.getMessage()]
    assert len(stops) == 1
    assert f"the budget max_total_bytes={budget} is reached (raise --request_capture_max_bytes" in stops[0]


def test_existing_files_count_and_capture_resumes_after_they_are_removed(tmp_path: Path, caplog):
    old = tmp_path / "capture-gateway-20251201T000000Z-000001.tfrecord"
    old.write_bytes(frame(predict_log("old").SerializeToString()) * 3)
    clock = Clock()
    caplog.set_level(logging.WARNING, logger="serving.capture")
    writer = _writer(tmp_path, clock, max_total_bytes=4 * RECORD, recheck_seconds=10)
    assert writer.write(predict_log("a"))
    assert not writer.write(predict_log("b"))
    old.unlink()
    clock.now += 9
    assert not writer.write(predict_log("c"))  # not looked at again yet
    clock.now += 1
    assert writer.write(predict_log("d"))
    writer.close()
    assert _ids(tmp_path) == ["a", "d"]
    assert [m for m in caplog.messages if "resumed" in m] != []


def test_day_budget_counts_todays_files_only(tmp_path: Path):
    (tmp_path / "capture-gateway-20251231T100000Z-000001.tfrecord").write_bytes(b"x" * 10 * RECORD)
    (tmp_path / "capture-gateway-20260101T000000Z-000001.tfrecord").write_bytes(b"x" * RECORD)
    clock = Clock(1_767_225_600.0 + 3600)
    with _writer(tmp_path, clock, max_day_bytes=3 * RECORD, recheck_seconds=60) as writer:
        assert [writer.write(predict_log(f"r{i}")) for i in range(3)] == [True, True, False]
        assert writer.stats().stopped_by == "max_day_bytes"
        clock.now += 86400  # a new UTC day: the next write looks again and resumes
        assert writer.write(predict_log("tomorrow"))


def test_a_disk_that_refuses_writes_drops_and_counts_never_raises(tmp_path: Path):
    # RLIMIT_FSIZE makes the kernel refuse writes past 3 records (EFBIG), as a full disk refuses them (ENOSPC).
    code = f"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({3 * RECORD + 5}, resource.RLIM_INFINITY))
from serving.capture import CaptureWriter
from tests.capture.records import predict_log
w = CaptureWriter(sys.argv[1], origin="gateway", max_file_bytes=1 << 20, max_file_seconds=60, max_total_bytes=1 << 30)
print([w.write(predict_log(f"r{{i:03d}}")) for i in range(5)])
s = w.stats()
print(s.written, s.dropped_error, s.stopped_by)
w.close()
"""
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.getcwd()}, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[True, True, True, False, False]", "3 2 write_error"]
    assert "request capture stopped: writing to" in out.stderr and out.stderr.count("stopped") == 1
    (done,) = tmp_path.iterdir()
    assert done.stat().st_size == 3 * RECORD  # the refused record was cut, the file reads to the end
    assert _ids(tmp_path) == ["r000", "r001", "r002"]


def test_threads_write_every_record_once_across_rotations(tmp_path: Path):
    start = threading.Event()
    with _writer(tmp_path, max_file_bytes=7 * RECORD) as writer:
        def worker(t: int) -> None:
            start.wait()
            for i in range(100):
                assert writer.write(predict_log(f"t{t}-{i:03d}"))

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
        for thread in threads:
            thread.start()
        start.set()
        for thread in threads:
            thread.join()
    ids = _ids(tmp_path)
    assert sorted(ids) == sorted(f"t{t}-{i:03d}" for t in range(6) for i in range(100))
    assert all(p.stat().st_size <= 7 * RECORD for p in tmp_path.iterdir())


@pytest.mark.parametrize("overrides, message", [
    ({"origin": "Gateway"}, "origin 'Gateway' must be lower-case"),
    ({"max_total_bytes": 0}, "max_total_bytes must be > 0"),
    ({"max_file_seconds": -1}, "max_file_seconds must be > 0"),
])
def test_bad_settings_are_refused_naming_the_setting(tmp_path: Path, overrides, message):
    with pytest.raises(ValueError, match=message):
        _writer(tmp_path, **overrides)
