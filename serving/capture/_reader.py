"""Reading capture files: ``read_capture`` (records, filtered) and ``is_capture``."""
from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from google.protobuf.message import DecodeError

from serving.capture._errors import CaptureError
from serving.capture._names import PART_SUFFIX, SUFFIX, parse_file_name
from serving.capture._records import METHODS, CaptureRecord
from serving.capture._tfrecord import iter_records
from serving.wire import apis

__all__ = ["Moment", "Source", "capture_files", "is_capture", "read_capture", "read_file_records"]

Source = str | os.PathLike | Sequence[str | os.PathLike]
Moment = float | int | dt.datetime


def capture_files(source: Source, *, include_partial: bool = False) -> list[Path]:
    """The files ``source`` names: a file, a directory's ``*.tfrecord`` files in name order, or a list of them.

    A directory's ``.part`` files (still being written) are left out unless
    ``include_partial``; a file named explicitly is always read. A missing
    path is a CaptureError.
    """
    if isinstance(source, (str, os.PathLike)):
        source = [source]
    files: list[Path] = []
    for item in source:
        path = Path(item)
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.is_file() and _listed(p, include_partial)))
        elif path.is_file():
            files.append(path)
        else:
            raise CaptureError("no such capture file or directory", path=path)
    return files


def _listed(path: Path, include_partial: bool) -> bool:
    return path.name.endswith(SUFFIX) or (include_partial and path.name.endswith(SUFFIX + PART_SUFFIX))


def read_capture(source: Source, *, since: Moment | None = None, until: Moment | None = None,
                 models: Iterable[str] | None = None, methods: Iterable[str] | None = None,
                 include_partial: bool = False) -> Iterator[CaptureRecord]:
    """Yield the records of ``source`` (see ``capture_files``), in file order.

    ``since``/``until`` (unix seconds, or a datetime; naive means UTC) keep
    records with ``since <= time < until``; ``models`` and ``methods`` keep
    records of those names (``methods`` from predict, classify, regress,
    multi_inference). A record that breaks the TFRecord framing or does not
    parse as a PredictionLog is a CaptureError naming the file and offset. A
    ``.part`` file's cut-off last record (the writer is mid-write) is skipped.
    """
    low, high = _seconds(since), _seconds(until)
    model_set = _names(models)
    method_set = _names(methods)
    if method_set is not None and not method_set <= set(METHODS):
        raise CaptureError(f"unknown method(s) {sorted(method_set - set(METHODS))}: methods are {', '.join(METHODS)}")
    for path in capture_files(source, include_partial=include_partial):
        for record in _read_file(path):
            if model_set is not None and record.model not in model_set:
                continue
            if method_set is not None and record.method not in method_set:
                continue
            if (low is not None and record.time < low) or (high is not None and record.time >= high):
                continue
            yield record


def _read_file(path: Path) -> Iterator[CaptureRecord]:
    for _offset, _size, record in read_file_records(path):
        yield record


def read_file_records(path: Path) -> Iterator[tuple[int, int, CaptureRecord]]:
    """``(offset, serialized size, record)`` of each record of one file (a ``.part`` file's cut tail skipped)."""
    partial = path.name.endswith(PART_SUFFIX)
    with open(path, "rb") as stream:
        for offset, data in iter_records(stream, path, allow_truncated_tail=partial):
            log = apis.PredictionLog()
            try:
                log.ParseFromString(data)
                record = CaptureRecord.from_log(log)
            except (DecodeError, ValueError) as exc:
                raise CaptureError(f"not a PredictionLog capture record: {exc}", path=path, offset=offset) from exc
            yield offset, len(data), record


def _seconds(moment: Moment | None) -> float | None:
    if moment is None or isinstance(moment, (int, float)):
        return moment
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return moment.timestamp()


def _names(names: Iterable[str] | None) -> set[str] | None:
    if names is None:
        return None
    return {names} if isinstance(names, str) else set(names)


def is_capture(path: str | os.PathLike[str]) -> bool:
    """True for a capture file (TFRecord of PredictionLog) or a directory holding one.

    A file counts when its name is a capture file name or its first record
    parses as a PredictionLog; a directory when it holds a file named as one,
    or a ``*.tfrecord`` file that counts (e.g. one ``filter`` wrote).
    """
    p = Path(path)
    if p.is_dir():
        children = sorted(child for child in p.iterdir() if child.is_file())
        return (any(parse_file_name(child) is not None for child in children)
                or any(is_capture(child) for child in children if child.name.endswith(SUFFIX)))
    if not p.is_file():
        return False
    if parse_file_name(p) is not None:
        return True
    try:
        with open(p, "rb") as stream:
            for _offset, data in iter_records(stream, p, allow_truncated_tail=True):
                log = apis.PredictionLog()
                log.ParseFromString(data)
                CaptureRecord.from_log(log)
                return True
    except (CaptureError, DecodeError, ValueError, OSError):
        return False
    return False
