"""Live canary analysis: production requests, as they are captured, asked of ``stable`` and ``canary``.

``python -m serving.rollout analyze --live DIR`` tails a capture directory
(TFRecord files of ``PredictionLog`` records, ``serving.capture``'s format: the
gateway's or the server's request capture) while it is written: records
appended to a ``.part`` file, the file renamed when it is closed (the same
file: read on from the same offset), new files, files deleted by the capture's
budget (forgotten). Each new record that is a Predict of the model, names no
version (a client's call, unlabeled or by label: a capture records an unlabeled
call the gateway routed under the label it chose) and calls ``--signature`` is
sent to both sides, by ``concurrency`` workers. The CLI calls each side by its
version number (the labels' versions when it started), so the analysis' own
calls, if the capture records them, name a version and are never compared
again. A record that finds
every worker busy and the queue full is skipped and counted (the analysis
samples a load it cannot keep up with, it never falls behind without bound).

The answers go into the offline analysis' :class:`~serving.rollout.analyze.Replay`
and its one verdict function, :func:`serving.rollout.analyze.analyze`: the same
checks and thresholds as ``analyze --inputs``. Latency is judged per window:
the compared requests in arrival order, cut into ``rounds`` windows (the
offline replay's rounds), each window's canary/stable percentile ratio.
It stops after ``duration`` seconds or ``max_requests`` compared requests,
whichever comes first.
"""
from __future__ import annotations

import queue
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from serving import codec, status
from serving.capture import CaptureRecord
from serving.capture._names import PART_SUFFIX, SUFFIX
from serving.capture._tfrecord import masked_crc32c
from serving.rollout.analyze import Replay, Side
from serving.stack.endpoint import is_gateway_refusal
from serving.wire import serving_apis_pb2 as apis

__all__ = ["CaptureTail", "LiveCounts", "compare_live", "parse_duration", "parse_record"]

def parse_record(record: bytes) -> Optional[CaptureRecord]:
    """The captured Predict in a serialized PredictionLog (``serving.capture``'s record), or None for a
    classify/regress/multi-inference log. ValueError (protobuf's DecodeError is one) for what is none."""
    captured = CaptureRecord.from_log(apis.PredictionLog.FromString(record))
    return captured if captured.method == "predict" else None


def _stem(path: Path) -> str:
    return path.name.removesuffix(PART_SUFFIX)


@dataclass
class _Tailed:
    path: Path
    offset: int = 0


class CaptureTail:
    """The records written to a capture directory since the tail started (``from_start``: since it began).

    :meth:`poll` returns every complete record found since the last poll, in file-name order (a capture's
    file names sort by time). A file is followed by its inode, so a ``.part`` file renamed when closed is
    read on from where it was; a record whose length is there but not its bytes yet waits for the next
    poll; a record whose checksum is wrong is skipped and counted (``bad``), as is the rest of a file
    whose length header is corrupt.
    """

    def __init__(self, directory: Path, *, from_start: bool = False) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise FileNotFoundError(f"{self.directory}: no capture directory (the gateway's or the server's "
                                    "request capture writes one)")
        self.bad = 0
        self._files: dict[tuple[int, int], _Tailed] = {}
        if not from_start:
            for key, path, size in self._listing():
                self._files[key] = _Tailed(path, size)

    def _listing(self) -> list[tuple[tuple[int, int], Path, int]]:
        found = []
        for path in sorted(self.directory.iterdir()):
            if not (path.name.endswith(SUFFIX) or path.name.endswith(SUFFIX + PART_SUFFIX)):
                continue
            try:
                info = path.stat()
            except FileNotFoundError:  # deleted by the capture's budget in between
                continue
            found.append(((info.st_dev, info.st_ino), path, info.st_size))
        # A renamed file sorts by its final name, a .part file by the name it will have: the same order.
        return sorted(found, key=lambda item: _stem(item[1]))

    def poll(self) -> list[bytes]:
        records: list[bytes] = []
        listing = self._listing()
        for key in set(self._files) - {key for key, _, _ in listing}:
            del self._files[key]  # deleted: nothing more to read there
        for key, path, size in listing:
            tailed = self._files.get(key)
            if tailed is None or _stem(tailed.path) != _stem(path) or size < tailed.offset:
                # new, or an inode the file system gave again to a new file after the old one was deleted
                tailed = self._files[key] = _Tailed(path)
            tailed.path = path  # a .part file renamed when closed: the same file, read on
            if size > tailed.offset:
                records.extend(self._read(tailed))
        return records

    def _read(self, tailed: _Tailed) -> list[bytes]:
        try:
            with open(tailed.path, "rb") as file:
                file.seek(tailed.offset)
                data = file.read()
        except FileNotFoundError:
            return []
        records: list[bytes] = []
        at = 0
        while len(data) - at >= 12:
            header = data[at:at + 8]
            (length,) = struct.unpack("<Q", header)
            if struct.unpack("<I", data[at + 8:at + 12])[0] != masked_crc32c(header):
                self.bad += 1  # a corrupt length: nothing after it in this file can be framed
                tailed.offset += len(data) - at
                return records
            end = at + 12 + length + 4
            if end > len(data):
                break  # the rest of this record is not written yet
            body = data[at + 12:at + 12 + length]
            if struct.unpack("<I", data[end - 4:end])[0] == masked_crc32c(body):
                records.append(body)
            else:
                self.bad += 1
            at = end
        tailed.offset += at
        return records


@dataclass
class LiveCounts:
    """What the live analysis saw: records read, compared, and why the others were not."""

    records: int = 0
    compared: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    bad_records: int = 0

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    def to_json(self) -> dict[str, codec.JSON]:
        return {"records": self.records, "compared": self.compared, "skipped": dict(self.skipped),
                "bad_records": self.bad_records}


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``10m`` or ``1h``."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    value = text.strip().lower()
    scale = units.get(value[-1:], None)
    number = value[:-1] if scale else value
    try:
        seconds = float(number) * (scale or 1.0)
    except ValueError:
        raise ValueError(f"a duration is seconds, or a number with s, m or h (90, 90s, 10m, 1h); got {text!r}") \
            from None
    if seconds <= 0:
        raise ValueError(f"a duration is positive, got {text!r}")
    return seconds


def _not_compared(captured: Optional[CaptureRecord], model: str, signature: str) -> Optional[str]:
    """Why a captured request is not compared (None: it is)."""
    if captured is None:
        return "not a predict"
    if captured.model != model:
        return "other model"
    if captured.version is not None:
        return "names a version"
    if captured.signature != signature:
        return "other signature"
    return None


def _windows(count: int, rounds: int) -> list[range]:
    """``count`` requests in arrival order, cut into at most ``rounds`` windows of near-equal size."""
    rounds = max(1, min(rounds, count))
    edges = [round(i * count / rounds) for i in range(rounds + 1)]
    return [range(edges[i], edges[i + 1]) for i in range(rounds)]


def compare_live(model: str, sides: Sequence[Side], tail: CaptureTail, *, signature: str = "serving_default",
                 rounds: int = 5, concurrency: int = 4, backlog: int = 64, duration: Optional[float] = None,
                 max_requests: Optional[int] = None, poll_s: float = 0.1, stop: Optional[threading.Event] = None,
                 clock: Callable[[], float] = time.perf_counter,
                 on_progress: Optional[Callable[[LiveCounts], None]] = None) -> tuple[Replay, LiveCounts]:
    """Compare ``sides`` (``stable`` then ``canary``) on the model's captured requests until a stop condition.

    ``duration`` seconds or ``max_requests`` compared requests (at least one of them, or ``stop`` set by
    the caller). Returns a :class:`Replay` for :func:`serving.rollout.analyze.analyze` and the counts.
    """
    if duration is None and max_requests is None and stop is None:
        raise ValueError("a live analysis needs a stop condition: a duration or a number of requests")
    stop = stop or threading.Event()
    counts = LiveCounts()
    names = [side.name for side in sides]
    answers: dict[int, dict[str, tuple[Optional[Mapping[str, np.ndarray]], Optional[float], Optional[str]]]] = {}
    lock = threading.Lock()
    work: queue.Queue = queue.Queue(maxsize=max(1, backlog))
    accepted = 0
    warmed = threading.Event()

    def call(side: Side, inputs: Mapping[str, np.ndarray]) -> tuple[Optional[Mapping[str, np.ndarray]],
                                                                     Optional[float], Optional[str]]:
        start = clock()
        try:
            answer = side.predict(inputs)
        except status.ServingError as exc:
            if is_gateway_refusal(exc.details):
                return None, None, "refused"
            return None, None, str(exc)
        return answer, clock() - start, None

    def worker() -> None:
        while True:
            item = work.get()
            if item is None:
                return
            index, inputs = item
            order = sides if index % 2 == 0 else list(reversed(sides))  # who goes first alternates, as offline
            result = {side.name: call(side, inputs) for side in order}
            with lock:
                answers[index] = result
                counts.compared += 1
                if max_requests is not None and counts.compared >= max_requests:
                    stop.set()

    workers = [threading.Thread(target=worker, name=f"live-{i}", daemon=True) for i in range(max(1, concurrency))]
    deadline = None if duration is None else clock() + duration
    started = False
    try:
        while not stop.is_set() and (deadline is None or clock() < deadline):
            records = tail.poll()
            counts.bad_records = tail.bad
            for record in records:
                if stop.is_set() or (max_requests is not None and accepted >= max_requests):
                    break
                counts.records += 1
                try:
                    captured = parse_record(record)
                except ValueError:  # protobuf's DecodeError, or a log of no known method
                    counts.skip("unreadable")
                    continue
                why = _not_compared(captured, model, signature)
                if why or captured is None:
                    counts.skip(why or "not a predict")
                    continue
                try:
                    inputs = captured.inputs()
                except Exception:  # noqa: BLE001 (a record this reader cannot decode is counted, never fatal)
                    counts.skip("unreadable")
                    continue
                if not warmed.is_set():
                    for side in sides:  # one unrecorded call a side: it opens the connection
                        call(side, inputs)
                    warmed.set()
                if not started:
                    for thread in workers:
                        thread.start()
                    started = True
                try:
                    work.put_nowait((accepted, inputs))
                    accepted += 1
                except queue.Full:
                    counts.skip("analysis busy")
            if on_progress is not None:
                on_progress(counts)
            if max_requests is not None and accepted >= max_requests:
                break
            stop.wait(poll_s)
    finally:
        for _ in workers:
            if started:
                work.put(None)
        for thread in workers:
            if started:
                thread.join()
    return _replay(names, answers, rounds), counts


def _replay(names: Sequence[str], answers: Mapping[int, Mapping[str, tuple]], rounds: int) -> Replay:
    """The compared requests as the offline analysis records a replay (windows for rounds)."""
    ordered = [answers[index] for index in sorted(answers)]
    out = Replay({n: [] for n in names}, {n: [] for n in names}, {n: [] for n in names}, dict.fromkeys(names, 0),
                 dict.fromkeys(names, 0), dict.fromkeys(names, 0), 0)
    for window in _windows(len(ordered), rounds):
        for name in names:
            out.latencies[name].append([])
        for index in window:
            for name in names:
                answer, latency, error = ordered[index][name]
                out.requests[name] += 1
                out.outputs[name].append(answer)
                if error == "refused":
                    out.refusals[name] += 1
                    out.unanswered[name] += 1
                elif error is not None:
                    out.errors[name].append(error)
                else:
                    out.latencies[name][-1].append(latency)
    return out
