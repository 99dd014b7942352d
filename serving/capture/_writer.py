"""CaptureWriter: capture records appended to size- and age-rotated files under a byte budget."""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from serving.capture._names import (
    ORIGIN_PATTERN,
    PART_SUFFIX,
    file_name,
    parse_file_name,
)
from serving.capture._tfrecord import frame

__all__ = ["CaptureStats", "CaptureWriter"]

_log = logging.getLogger("serving.capture")

BUDGET_TOTAL = "max_total_bytes"
BUDGET_DAY = "max_day_bytes"
WRITE_ERROR = "write_error"


@dataclass(frozen=True)
class CaptureStats:
    """A writer's counts since it started, and why it is stopped (None while it writes).

    ``stopped_by`` is ``"max_total_bytes"``, ``"max_day_bytes"`` (a budget
    reached) or ``"write_error"`` (the disk refused a write: full, read-only).
    """

    written: int
    bytes_written: int
    dropped_budget: int
    dropped_error: int
    files_closed: int
    used_bytes: int
    stopped_by: str | None


class CaptureWriter:
    """Appends PredictionLog records to TFRecord files in ``directory``.

    Files are named ``capture-<origin>-<UTC time>-<seq>.tfrecord``, written as
    ``<name>.part`` (mode 0600) and renamed when closed: when the next record
    would pass ``max_file_bytes``, when the file is ``max_file_seconds`` old
    (checked on each write and by ``rotate_if_due``), at a new UTC day, and by
    ``close``. The directory is created with mode 0700 where missing.

    Budgets: the capture files in the directory (any origin) never pass
    ``max_total_bytes``, nor, when ``max_day_bytes`` is set, the files opened
    on one UTC day. A record that would pass one is dropped: capture stops,
    one warning names the budget and the setting to change
    (``setting_names`` maps ``"max_total_bytes"``/``"max_day_bytes"`` to the
    caller's flag), and every later record is dropped and counted. A write
    the disk refuses (full, read-only) is cut from the file and stops capture
    the same way. A stopped writer looks at the directory again every
    ``recheck_seconds`` and resumes when files were removed or a new day began.

    ``write`` is thread-safe, never raises (it returns False for a dropped
    record) and holds one record in memory at a time. The directory's usage is
    read when a file is opened or closed: writers sharing a directory see each
    other's closed files, not their open ones.
    """

    def __init__(self, directory: str | os.PathLike, *, origin: str, max_file_bytes: int, max_file_seconds: float,
                 max_total_bytes: int, max_day_bytes: int | None = None,
                 setting_names: Mapping[str, str] | None = None, recheck_seconds: float = 10.0,
                 clock: Callable[[], float] = time.time):
        if not ORIGIN_PATTERN.fullmatch(origin):
            raise ValueError(f"capture origin {origin!r} must be lower-case letters, digits and '-'")
        for name, value in (("max_file_bytes", max_file_bytes), ("max_file_seconds", max_file_seconds),
                            ("max_total_bytes", max_total_bytes), ("max_day_bytes", max_day_bytes)):
            if value is not None and not value > 0:
                raise ValueError(f"CaptureWriter {name} must be > 0, got {value}")
        self._dir = Path(directory)
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._origin = origin
        self._max_file_bytes = max_file_bytes
        self._max_file_seconds = max_file_seconds
        self._max_total_bytes = max_total_bytes
        self._max_day_bytes = max_day_bytes
        self._settings = dict(setting_names or {})
        self._recheck_seconds = recheck_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._part: Path | None = None
        self._opened = 0.0
        self._size = 0
        self._seq = 0
        self._closed = False
        self._stopped_by: str | None = None
        self._stopped_at = 0.0
        self._reported: str | None = None  # the stop last logged, until a record is written again
        self._written = self._bytes = self._dropped_budget = self._dropped_error = self._files = 0
        self._used_total = self._used_day = 0
        self._scanned_day = ""
        self._used_total, self._used_day = self._scan(clock())

    @property
    def directory(self) -> Path:
        return self._dir

    def write(self, log: Any) -> bool:
        """Append one record (a PredictionLog message or its bytes); False when it was dropped."""
        try:
            data = log if isinstance(log, (bytes, bytearray)) else log.SerializeToString()
            record = frame(bytes(data))
        except Exception:  # noqa: BLE001 - a message that does not serialize is the caller's bug; never raise
            _log.exception("request capture: a record did not serialize; dropped")
            with self._lock:
                self._dropped_error += 1
            return False
        with self._lock:
            return self._write_locked(record)

    def rotate_if_due(self) -> None:
        """Close the open file when it is ``max_file_seconds`` old or from an earlier UTC day."""
        with self._lock:
            if self._fd is not None and self._due(self._clock()):
                self._close_file()

    def close(self) -> None:
        """Close and rename the open file; later writes are dropped. Idempotent."""
        with self._lock:
            self._closed = True
            self._close_file()

    def stats(self) -> CaptureStats:
        with self._lock:
            return CaptureStats(self._written, self._bytes, self._dropped_budget, self._dropped_error, self._files,
                                self._used_total + self._size, self._stopped_by)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- under self._lock --------------------------------------------------------------

    def _write_locked(self, record: bytes) -> bool:
        if self._closed:
            return False
        now = self._clock()
        if self._stopped_by is not None and not self._resumed(now):
            self._count_drop()
            return False
        if self._fd is not None and (self._due(now) or
                                     (self._size and self._size + len(record) > self._max_file_bytes)):
            self._close_file()
        budget = self._budget_passed(len(record), now)
        if budget is not None:
            self._stop(budget, now)
            self._dropped_budget += 1
            return False
        return self._append(record, now)

    def _append(self, record: bytes, now: float) -> bool:
        try:
            if self._fd is None:
                self._open_file(now)
            assert self._fd is not None
            view = memoryview(record)
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as exc:
            self._undo_partial_write()
            self._stop(WRITE_ERROR, now, detail=f"{exc.strerror or exc}")
            self._dropped_error += 1
            return False
        if self._reported is not None:
            _log.warning("request capture resumed: writing to %s again (was stopped by %s)", self._dir, self._reported)
            self._reported = None
        self._size += len(record)
        self._written += 1
        self._bytes += len(record)
        return True

    def _undo_partial_write(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, self._size)
            os.lseek(self._fd, self._size, os.SEEK_SET)
        except OSError:
            pass
        self._close_file()

    def _due(self, now: float) -> bool:
        return now - self._opened >= self._max_file_seconds or _day(now) != _day(self._opened)

    def _budget_passed(self, size: int, now: float) -> str | None:
        total = self._used_total + self._size + size
        if total > self._max_total_bytes:
            return BUDGET_TOTAL
        day_budget = self._max_day_bytes
        current_today = self._size if self._fd is not None and _day(self._opened) == _day(now) else 0
        if day_budget is not None and self._used_day + current_today + size > day_budget:
            return BUDGET_DAY
        return None

    def _open_file(self, now: float) -> None:
        if _day(now) != self._scanned_day:
            self._used_total, self._used_day = self._scan(now)
        while True:
            self._seq += 1
            part = self._dir / (file_name(self._origin, now, self._seq) + PART_SUFFIX)
            if not part.exists() and not part.with_suffix("").exists():
                break
        self._fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        os.fchmod(self._fd, 0o600)
        self._part, self._opened, self._size = part, now, 0

    def _close_file(self) -> None:
        if self._fd is None or self._part is None:
            return
        fd, part, size = self._fd, self._part, self._size
        self._fd, self._part, self._size = None, None, 0
        try:
            os.fsync(fd)
        except OSError:
            pass
        os.close(fd)
        try:
            if size:
                os.rename(part, part.with_suffix(""))
            else:
                part.unlink()
        except OSError:
            _log.exception("request capture: could not finish %s", part)
        self._files += 1 if size else 0
        self._used_total, self._used_day = self._scan(self._clock())

    def _scan(self, now: float) -> tuple[int, int]:
        """Bytes of the capture files in the directory, in all and opened on ``now``'s UTC day."""
        today = _day(now)
        self._scanned_day = today
        total = day = 0
        try:
            entries = list(os.scandir(self._dir))
        except OSError:
            return self._used_total, self._used_day
        for entry in entries:
            parsed = parse_file_name(entry.name)
            if parsed is None or (self._part is not None and entry.path == str(self._part)):
                continue
            try:
                size = entry.stat().st_size
            except OSError:
                continue
            total += size
            day += size if parsed.day == today else 0
        return total, day

    def _stop(self, reason: str, now: float, *, detail: str = "") -> None:
        if self._reported != reason:
            self._log_stop(reason, detail)
            self._reported = reason
        self._stopped_by, self._stopped_at = reason, now

    def _log_stop(self, reason: str, detail: str) -> None:
        if reason == WRITE_ERROR:
            _log.warning("request capture stopped: writing to %s failed (%s); records are dropped and counted; "
                         "capture tries again every %g s", self._dir, detail, self._recheck_seconds)
            return
        used = self._used_total if reason == BUDGET_TOTAL else self._used_day
        setting = self._settings.get(reason, f"CaptureWriter {reason}")
        scope = "" if reason == BUDGET_TOTAL else " today (UTC)"
        _log.warning("request capture stopped: %s holds %d bytes of capture files%s; the budget %s=%d is reached "
                     "(raise %s or delete old capture files); records are dropped and counted",
                     self._dir, used, scope, reason,
                     self._max_total_bytes if reason == BUDGET_TOTAL else self._max_day_bytes, setting)

    def _resumed(self, now: float) -> bool:
        if now - self._stopped_at < self._recheck_seconds:
            return False
        self._stopped_at = now
        self._used_total, self._used_day = self._scan(now)
        if self._stopped_by != WRITE_ERROR and self._budget_passed(0, now) is not None:
            return False
        self._stopped_by = None
        return True

    def _count_drop(self) -> None:
        if self._stopped_by == WRITE_ERROR:
            self._dropped_error += 1
        else:
            self._dropped_budget += 1


def _day(when: float) -> str:
    return time.strftime("%Y%m%d", time.gmtime(when))
