"""A request capture as an input source: one capture file, a directory of them, or a time window of them.

Every command that replays recorded traffic takes the same source and the
same window: ``python -m exporter export --samples CAPTURE`` (goldens and
warmup), ``python -m serving.rollout analyze --inputs CAPTURE`` and
``python -m loadtest run|sweep --input-data CAPTURE``, each with ``--since`` /
``--until`` (ISO 8601, e.g. ``2026-12-06T08:00:00Z``, or unix seconds; a
record is in the window when ``since <= its time < until``). The files are
``serving.capture``'s (TF Serving's ``PredictionLog`` TFRecords); a directory
means its capture files in name order (``.part`` files still being written
are skipped).

:func:`read_source` returns the captured Predict requests, or raises
:class:`CaptureSourceError` naming the rule the source broke (no such file,
not a capture, a bad record, nothing in the window, several models); each
CLI prints it and exits 2. :func:`signature_problems` checks captured inputs
against a signature with TF Serving's rules (input names, dtype, shape).
Importing this module loads no TensorFlow.
"""
from __future__ import annotations

import argparse
import datetime as _dt
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional, Sequence, Union

import numpy as np

from serving.capture import CaptureError, CaptureRecord, is_capture, read_capture

if TYPE_CHECKING:
    from serving.codec import Signature

__all__ = ["CaptureSourceError", "Window", "Captured", "parse_time", "add_window_arguments", "window_from_args",
           "is_capture_source", "read_source", "signature_problems", "concatenate_requests"]

CAPTURE_SUFFIX = ".tfrecord"


class CaptureSourceError(ValueError):
    """A capture that cannot be replayed; the message names the source and the rule. CLIs exit 2."""


@dataclass(frozen=True)
class Window:
    """``since <= record time < until``, unix seconds; None: open on that side."""

    since: Optional[float] = None
    until: Optional[float] = None

    def __post_init__(self) -> None:
        if self.since is not None and self.until is not None and self.until <= self.since:
            raise CaptureSourceError(f"--until ({_iso(self.until)}) must be after --since ({_iso(self.since)})")

    def describe(self) -> str:
        if self.since is None and self.until is None:
            return ""
        return (f" between {_iso(self.since) if self.since is not None else 'the start'} and "
                f"{_iso(self.until) if self.until is not None else 'the end'}")


def _iso(seconds: float) -> str:
    return _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_time(text: str) -> float:
    """Unix seconds of ``text``: unix seconds (``1765008000``, ``1765008000.5``) or ISO 8601 (``2026-12-06T08:00Z``;
    a time without a zone is UTC). ValueError naming both spellings otherwise."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = _dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        raise ValueError(f"{text!r} is neither ISO 8601 (e.g. 2026-12-06T08:00:00Z) nor unix seconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.timezone.utc)
    return moment.timestamp()


def _time_argument(text: str) -> float:
    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_window_arguments(parser: Union[argparse.ArgumentParser, argparse._ArgumentGroup], flag: str) -> None:
    """``--since`` / ``--until``: the time window of the capture ``flag`` names."""
    parser.add_argument("--since", type=_time_argument, default=None, metavar="TIME",
                        help=f"with a capture as {flag}: only requests at or after TIME (ISO 8601, e.g. "
                             "2026-12-06T08:00:00Z, or unix seconds)")
    parser.add_argument("--until", type=_time_argument, default=None, metavar="TIME",
                        help=f"with a capture as {flag}: only requests before TIME")


def window_from_args(args: argparse.Namespace) -> Window:
    return Window(getattr(args, "since", None), getattr(args, "until", None))


def is_capture_source(path: Union[str, Path]) -> bool:
    """True for a directory (its capture files are read) or a capture file (``.tfrecord``, or what
    ``serving.capture.is_capture`` recognizes)."""
    path = Path(path)
    if path.is_dir() or path.suffix == CAPTURE_SUFFIX:
        return True
    try:
        return path.is_file() and is_capture(path)
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class Captured:
    """The captured Predict requests of one model read from a source, in capture order."""

    source: str
    model: str
    records: tuple[CaptureRecord, ...]
    skipped: Mapping[str, int]   # records left out, by reason ("classify", "model other", ...)

    def describe(self) -> str:
        first, last = self.records[0].time, self.records[-1].time
        left = "".join(f", {n} {why} left out" for why, n in sorted(self.skipped.items()))
        return (f"capture {self.source}: {len(self.records)} Predict requests of {self.model!r} "
                f"from {_iso(first)} to {_iso(last)}{left}")


def read_source(source: Union[str, Path], window: Window = Window(), *, model: Optional[str] = None,
                flag: str = "--samples") -> Captured:
    """The Predict requests captured in ``source`` within ``window``, of ``model`` when it is named.

    Without ``model`` (or when the capture holds no request of it) the
    capture must hold one model. :class:`CaptureSourceError` for a missing
    source, a directory without capture files, a record that does not parse,
    no Predict request in the window, or several models to choose from.
    """
    path = Path(source)
    if not path.exists():
        raise CaptureSourceError(f"{flag} {path}: no such capture file or directory")
    if path.is_dir() and not any(p.is_file() and p.name.endswith(CAPTURE_SUFFIX) for p in path.iterdir()):
        raise CaptureSourceError(f"{flag} {path}: the directory holds no capture files (*{CAPTURE_SUFFIX}; "
                                 "files still being written end in .part and are not read)")
    records, skipped = [], {}
    try:
        for record in read_capture(path, since=window.since, until=window.until):
            if record.method != "predict":
                skipped[record.method] = skipped.get(record.method, 0) + 1
                continue
            records.append(record)
    except CaptureError as exc:
        raise CaptureSourceError(f"{flag} {path}: not a readable capture (TF Serving PredictionLog TFRecords): "
                                 f"{exc}") from None
    records.sort(key=lambda r: r.time)   # files in name order hold their records in time order; stable
    if not records:
        what = f" ({', '.join(f'{n} {m}' for m, n in sorted(skipped.items()))} requests only)" if skipped else ""
        raise CaptureSourceError(f"{flag} {path}: no captured Predict request{window.describe()}{what}; only "
                                 "Predict requests are replayed")
    models = sorted({r.model for r in records})
    chosen = model if model in models else models[0] if len(models) == 1 else None
    if chosen is None:
        raise CaptureSourceError(f"{flag} {path}: the capture holds requests of several models ({', '.join(models)})"
                                 + (f" and none of {model!r}" if model else "")
                                 + "; filter it first (python -m serving.capture filter --model NAME)")
    kept = [r for r in records if r.model == chosen]
    if len(kept) < len(records):
        skipped["of other models"] = len(records) - len(kept)
    return Captured(str(path), chosen, tuple(kept), skipped)


def signature_problems(inputs: Mapping[str, np.ndarray], signature: Signature, where: str) -> list[str]:
    """Why ``inputs`` (one captured request) cannot feed ``signature``, TF Serving's rules: exactly the
    signature's input names, each with its dtype, and a shape the signature accepts."""
    problems = []
    if set(inputs) != set(signature.inputs):
        missing, extra = sorted(set(signature.inputs) - set(inputs)), sorted(set(inputs) - set(signature.inputs))
        parts = ([f"lacks input(s) {', '.join(repr(m) for m in missing)}"] if missing else []) + \
                ([f"has input(s) {', '.join(repr(e) for e in extra)} the signature does not take"] if extra else [])
        problems.append(f"{where} {' and '.join(parts)}: a Predict request feeds exactly the inputs of signature "
                        f"{signature.name!r} ({', '.join(sorted(signature.inputs))})")
        return problems
    for name, spec in signature.inputs.items():
        value = np.asarray(inputs[name])
        strings = spec.dtype == np.dtype(object)
        if (value.dtype.kind in "OSU") != strings or (not strings and value.dtype != spec.dtype):
            problems.append(f"{where} input {name!r} is {_dtype(value)}; signature {signature.name!r} takes "
                            f"{'string' if strings else spec.dtype.name} (an input's dtype must be the signature's)")
        elif not spec.accepts_shape(value.shape):
            problems.append(f"{where} input {name!r} has shape {list(value.shape)}; signature {signature.name!r} "
                            f"takes {list(spec.dims or [])} (-1: any) (an input's shape must fit the signature's)")
    return problems


def _dtype(value: np.ndarray) -> str:
    return "string" if value.dtype.kind in "OSU" else value.dtype.name


def concatenate_requests(requests: Sequence[Mapping[str, np.ndarray]], max_rows: int
                         ) -> tuple[dict[str, np.ndarray], int]:
    """The rows of consecutive ``requests`` concatenated, up to ``max_rows``; and how many requests gave rows.

    Requests whose dimensions after the batch differ from the first's (text
    of another length) are passed over: rows are stacked, never padded.
    """
    first = requests[0]
    trailing = {k: np.asarray(v).shape[1:] for k, v in first.items()}
    chunks: dict[str, list[np.ndarray]] = {k: [] for k in first}
    rows = used = 0
    for request in requests:
        if rows >= max_rows:
            break
        if set(request) != set(first) or any(np.asarray(v).shape[1:] != trailing[k] for k, v in request.items()):
            continue
        take = min(max_rows - rows, len(next(iter(request.values()))))
        for k, v in request.items():
            chunks[k].append(np.asarray(v)[:take])
        rows += take
        used += 1
    return {k: np.concatenate(v) for k, v in chunks.items()}, used
