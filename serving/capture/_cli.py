"""``python -m serving.capture``: list, cut and convert capture files.

Every command reads one or more SOURCEs (a capture file or a directory of
them; ``--partial`` adds the ``.part`` files still being written):

- ``ls``: records per model, signature and method, their bytes, the time span
  and the files (``--json`` for a machine);
- ``filter --out FILE``: the records of ``--model``/``--signature``/``--method``
  within ``--since``/``--until`` (ISO 8601, e.g. 2026-01-31T12:00:00Z, or unix
  seconds) into a new capture file;
- ``sample --out FILE (--rate R | --count N) [--seed S]``: a seeded random
  share, or exactly N records (in their order), into a new capture file;
- ``to-npz --out DIR``: the Predict inputs of each model and signature,
  concatenated along the batch dimension, as ``DIR/<model>.<signature>.npz``
  (what the exporter's ``--samples`` and the load tests read);
- ``to-rest [--out FILE] [--format row|columnar]``: each Predict record as a
  REST Predict body (Classify/Regress as ``examples``), one JSON per line, for
  one model and method (one URL).

Files written are new (an existing ``--out`` is refused), mode 0600, and
appear whole (written aside, then renamed). Exit codes: 0 done, 2 refused
(the message names the rule).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from serving.capture._errors import CaptureError
from serving.capture._reader import capture_files, read_capture, read_file_records
from serving.capture._records import METHODS, CaptureRecord
from serving.capture._tfrecord import frame
from serving.codec import (
    example_to_dict,
    examples_to_rest_request,
    inputs_to_rest_request,
)

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m serving.capture",
        description="List, cut and convert request capture files (TFRecords of PredictionLog).")
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help)
        sub.add_argument("sources", nargs="+", metavar="SOURCE", help="a capture file or a directory of them")
        sub.add_argument("--partial", action="store_true", help="also read .part files still being written")
        return sub

    ls = command("ls", "records per model, signature and method; bytes, time span, files")
    ls.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    for name, help in (("filter", "the records that match into a new capture file"),
                       ("sample", "a seeded sample of the records into a new capture file")):
        sub = command(name, help)
        sub.add_argument("--out", required=True, type=Path, help="the new capture file")
        _add_selection(sub)
        if name == "sample":
            size = sub.add_mutually_exclusive_group(required=True)
            size.add_argument("--rate", type=float, help="keep each record with this probability (0..1)")
            size.add_argument("--count", type=int, help="keep exactly this many records (all if fewer)")
            sub.add_argument("--seed", type=int, default=0, help="the random seed (default 0)")
    npz = command("to-npz", "Predict inputs per model and signature, concatenated along the batch dimension")
    npz.add_argument("--out", required=True, type=Path, help="directory for <model>.<signature>.npz")
    _add_selection(npz)
    rest = command("to-rest", "REST request bodies, one JSON per line")
    rest.add_argument("--out", type=Path, help="the JSON-lines file (default: standard output)")
    rest.add_argument("--format", choices=("row", "columnar"), default="row",
                      help="Predict bodies as instances (row, default) or inputs (columnar)")
    _add_selection(rest)
    return parser


def _add_selection(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--model", action="append", help="keep this model (repeatable)")
    sub.add_argument("--signature", action="append", help="keep this signature (repeatable)")
    sub.add_argument("--method", action="append", choices=METHODS, help="keep this method (repeatable)")
    sub.add_argument("--since", type=_moment, help="keep records at or after this time (ISO 8601 or unix seconds)")
    sub.add_argument("--until", type=_moment, help="keep records before this time (ISO 8601 or unix seconds)")


def _moment(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time: use ISO 8601 (2026-01-31T12:00:00Z) or "
                                         "unix seconds") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=dt.timezone.utc)).timestamp()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except (CaptureError, ValueError) as exc:
        print(f"python -m serving.capture {args.command}: {exc}", file=sys.stderr)
        return 2


def _records(args: argparse.Namespace) -> Iterator[CaptureRecord]:
    records = read_capture(args.sources, since=getattr(args, "since", None), until=getattr(args, "until", None),
                           models=getattr(args, "model", None), methods=getattr(args, "method", None),
                           include_partial=args.partial)
    signatures = getattr(args, "signature", None)
    return (r for r in records if not signatures or r.signature in signatures)


# -- ls ---------------------------------------------------------------------------------------------
def _ls(args: argparse.Namespace) -> int:
    files = capture_files(args.sources, include_partial=args.partial)
    groups: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    first = last = None
    for path in files:
        for _offset, size, record in read_file_records(path):
            group = groups[(record.model, record.signature, record.method)]
            group[0] += 1
            group[1] += size
            first = record.time if first is None else min(first, record.time)
            last = record.time if last is None else max(last, record.time)
    file_bytes = sum(p.stat().st_size for p in files)
    records = sum(n for n, _ in groups.values())
    if args.json:
        print(json.dumps({
            "files": len(files), "file_bytes": file_bytes, "records": records,
            "first": _iso(first), "last": _iso(last),
            "groups": [{"model": m, "signature": s, "method": k, "records": n, "bytes": b}
                       for (m, s, k), (n, b) in sorted(groups.items())]}, indent=2))
        return 0
    rows = [("MODEL", "SIGNATURE", "METHOD", "RECORDS", "BYTES")]
    rows += [(m, s, k, str(n), str(b)) for (m, s, k), (n, b) in sorted(groups.items())]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    print(f"{records} records in {len(files)} file(s), {file_bytes} bytes; "
          f"from {_iso(first) or '-'} to {_iso(last) or '-'}")
    return 0


def _iso(when: float | None) -> str | None:
    if when is None:
        return None
    return dt.datetime.fromtimestamp(when, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# -- filter / sample ------------------------------------------------------------------------------
def _filter(args: argparse.Namespace) -> int:
    count = _write_capture(args.out, (r.log.SerializeToString() for r in _records(args)))
    print(f"wrote {count} records to {args.out}")
    return 0


def _sample(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    if args.rate is not None:
        if not 0.0 <= args.rate <= 1.0:
            raise ValueError(f"--rate must be between 0 and 1, not {args.rate}")
        chosen: Iterable[CaptureRecord] = (r for r in _records(args) if rng.random() < args.rate)
    else:
        if args.count < 0:
            raise ValueError(f"--count must not be negative, not {args.count}")
        chosen = _reservoir(_records(args), args.count, rng)
    count = _write_capture(args.out, (r.log.SerializeToString() for r in chosen))
    print(f"wrote {count} records to {args.out}")
    return 0


def _reservoir(records: Iterable[CaptureRecord], count: int, rng: random.Random) -> list[CaptureRecord]:
    """Exactly ``count`` records chosen uniformly (Algorithm R), in their original order."""
    kept: list[tuple[int, CaptureRecord]] = []
    for index, record in enumerate(records):
        if index < count:
            kept.append((index, record))
        elif (slot := rng.randrange(index + 1)) < count:
            kept[slot] = (index, record)
    return [record for _, record in sorted(kept, key=lambda pair: pair[0])]


def _write_capture(out: Path, records: Iterable[bytes]) -> int:
    count = 0

    def framed() -> Iterator[bytes]:
        nonlocal count
        for data in records:
            count += 1
            yield frame(data)

    _write_new(out, framed())
    return count


def _write_new(out: Path, chunks: Iterable[bytes]) -> None:
    """Write ``out`` whole or not at all: aside (0600), then renamed; an existing ``out`` is refused."""
    if out.exists():
        raise ValueError(f"--out {out} exists: commands write new files only (remove it or choose another name)")
    out.parent.mkdir(parents=True, exist_ok=True)
    handle, aside = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        os.fchmod(handle, 0o600)
        with os.fdopen(handle, "wb") as stream:
            for chunk in chunks:
                stream.write(chunk)
        os.link(aside, out)   # fails if out appeared meanwhile: never overwrites
    finally:
        os.unlink(aside)


# -- to-npz -------------------------------------------------------------------------------------
def _to_npz(args: argparse.Namespace) -> int:
    batches: dict[tuple[str, str], dict[str, list[np.ndarray]]] = defaultdict(lambda: defaultdict(list))
    skipped = 0
    for record in _records(args):
        if record.method != "predict":
            skipped += 1
            continue
        group = batches[(record.model, record.signature)]
        inputs = record.inputs()
        if group and set(group) != set(inputs):
            raise ValueError(f"model {record.model} signature {record.signature}: record {record.request_id} has "
                             f"inputs {sorted(inputs)}, earlier records {sorted(group)}; one .npz holds one set "
                             "of inputs (select records with --since/--until)")
        for name, array in inputs.items():
            _check_rows(record, name, array, group[name])
            group[name].append(array)
    if not batches:
        raise ValueError(f"no Predict records to convert ({skipped} Classify/Regress/MultiInference skipped)")
    args.out.mkdir(parents=True, exist_ok=True)
    for (model, signature), group in sorted(batches.items()):
        path = args.out / f"{model}.{signature}.npz"
        arrays = {name: np.concatenate(parts, axis=0) for name, parts in group.items()}
        _write_new(path, [_npz_bytes(arrays)])
        rows = next(iter(arrays.values())).shape[0]
        print(f"wrote {path}: {rows} rows of {', '.join(f'{n}{list(a.shape)}' for n, a in sorted(arrays.items()))}")
    if skipped:
        print(f"skipped {skipped} Classify/Regress/MultiInference records (to-npz converts Predict inputs)")
    return 0


def _check_rows(record: CaptureRecord, name: str, array: np.ndarray, earlier: list[np.ndarray]) -> None:
    if array.ndim == 0:
        raise ValueError(f"model {record.model} input {name!r} of record {record.request_id} is a scalar: "
                         "inputs are concatenated along a batch dimension")
    if earlier and (earlier[0].shape[1:] != array.shape[1:] or earlier[0].dtype != array.dtype):
        raise ValueError(f"model {record.model} signature {record.signature} input {name!r}: record "
                         f"{record.request_id} has {array.dtype}{list(array.shape)}, earlier records "
                         f"{earlier[0].dtype}{list(earlier[0].shape)}; rows are concatenated along the batch "
                         "dimension only")


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **{name: (a.astype(bytes) if a.dtype == object else a) for name, a in arrays.items()})
    return buffer.getvalue()


# -- to-rest ------------------------------------------------------------------------------------
def _to_rest(args: argparse.Namespace) -> int:
    records = list(_records(args))
    targets = sorted({(r.model, r.method) for r in records})
    if len(targets) > 1:
        raise ValueError("to-rest writes the bodies of one model and method (one URL); this capture holds "
                         f"{', '.join(f'{m}:{k}' for m, k in targets)}: choose one with --model and --method")
    if targets and targets[0][1] == "multi_inference":
        raise ValueError("MultiInference has no REST API: to-rest converts predict, classify and regress records")
    lines = (_rest_body(r, args.format == "row") + b"\n" for r in records)
    if args.out is None:
        for line in lines:
            sys.stdout.buffer.write(line)
        sys.stdout.flush()
    else:
        _write_new(args.out, lines)
        print(f"wrote {len(records)} bodies to {args.out}", file=sys.stderr)
    return 0


def _rest_body(record: CaptureRecord, row_format: bool) -> bytes:
    if record.method == "predict":
        return inputs_to_rest_request(record.inputs(), signature_name=record.signature, row_format=row_format)
    request_input: Any = record.request.input
    if request_input.WhichOneof("kind") == "example_list_with_context":
        listed = request_input.example_list_with_context
        return examples_to_rest_request([example_to_dict(e) for e in listed.examples],
                                        context=example_to_dict(listed.context), signature_name=record.signature)
    return examples_to_rest_request([example_to_dict(e) for e in request_input.example_list.examples],
                                    signature_name=record.signature)


_COMMANDS = {"ls": _ls, "filter": _filter, "sample": _sample, "to-npz": _to_npz, "to-rest": _to_rest}
