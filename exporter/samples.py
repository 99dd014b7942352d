"""Golden inputs of a user's model: the user's samples, else synthesized from its signatures.

The same rows are replayed through every export (fp32 against the model
itself, other variants against fp32) and tiled into the warmup for every
allowed batch size. Samples may be a path (``.npz`` arrays by input name, or
a TF Serving REST Predict body ``.json``, read by ``serving.codec.load_inputs``),
``{input name: array}``, or ``{signature key: {input name: array}}``, or a request capture
(:class:`CaptureSamples`, or the path of a capture file or directory:
``exporter.capture_source``). A signature the samples do not fit (other input names) is synthesized with
``serving.codec.synthesize_inputs``; then the goldens check that the export
computes what the model computes, and the manifest says they are synthetic.

From a capture, the rows are the captured Predict requests' own, in time
order: the goldens are the first :data:`GOLDEN_ROWS` rows, the warmup rows
the first ``warmup_rows`` (the largest batch size the warmup covers), both
made by concatenating the rows of consecutive requests of each signature. A
captured request whose inputs do not fit its signature (names, dtype, shape)
refuses the whole capture with a ``CaptureSourceError`` naming the input and
the rule.
"""
from __future__ import annotations

from pathlib import Path
from dataclasses import dataclass, field
from typing import Mapping, Optional, Union

import numpy as np

from exporter.capture_source import (
    Captured,
    CaptureSourceError,
    Window,
    concatenate_requests,
    is_capture_source,
    read_source,
    signature_problems,
)
from exporter.exportable import ExportError
from serving.codec import Signature, TensorSpec, load_inputs, synthesize_inputs

__all__ = ["Samples", "CaptureSamples", "SampleRows", "GOLDEN_ROWS", "SYNTHETIC_ROWS", "golden_inputs",
           "sample_rows"]


@dataclass(frozen=True)
class CaptureSamples:
    """A request capture as samples: a capture file or directory, the time window, the model's name in it
    (None: the exported model's name when the capture holds it, else the capture's one model)."""

    source: Union[str, Path]
    window: Window = Window()
    model: Optional[str] = None


Samples = Union[str, Path, CaptureSamples, Mapping[str, np.ndarray], Mapping[str, Mapping[str, np.ndarray]]]
GOLDEN_ROWS = 32      # at most this many of the user's rows are kept as goldens (and tiled into the warmup)
SYNTHETIC_ROWS = 8


@dataclass(frozen=True)
class SampleRows:
    """Golden rows and warmup rows per signature, where they came from, and the notes for the manifest.

    ``warmup`` holds only the signatures whose warmup rows differ from their
    goldens (a capture's); ``warmup_source`` describes them ("" otherwise).
    """

    golden: dict[str, dict[str, np.ndarray]]
    golden_source: str
    notes: tuple[str, ...]
    warmup: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    warmup_source: str = ""


def sample_rows(signatures: Mapping[str, Signature], samples: Optional[Samples] = None, *,
                warmup_rows: int = GOLDEN_ROWS, name: Optional[str] = None) -> SampleRows:
    """:func:`golden_inputs`, and for a capture the warmup rows too (``warmup_rows`` per signature).

    ``name`` is the exported model's name (which model of a capture to take).
    CaptureSourceError for a capture that cannot be read or does not fit.
    """
    if isinstance(samples, (str, Path)) and is_capture_source(samples):
        samples = CaptureSamples(samples)
    if not isinstance(samples, CaptureSamples):
        return SampleRows(*golden_inputs(signatures, samples))
    captured = read_source(samples.source, samples.window, model=samples.model or name)
    requests = _captured_requests(signatures, captured)
    golden, warmup, notes = {}, {}, [f"golden and warmup rows come from {captured.describe()}."]
    for key, signature in signatures.items():
        if key not in requests:
            golden[key] = synthesize_inputs(signature, SYNTHETIC_ROWS, seed=0)
            notes.append(f"no captured request calls signature {key!r}: its golden inputs are synthetic.")
            continue
        golden[key], _ = concatenate_requests(requests[key], GOLDEN_ROWS)
        warmup[key], used = concatenate_requests(requests[key], warmup_rows)
        rows = len(next(iter(warmup[key].values())))
        if rows < warmup_rows:
            notes.append(f"signature {key!r}: the capture holds {rows} rows; warmup batches above that repeat them.")
    synthetic = len(golden) > len(warmup)
    return SampleRows(golden, "synthetic" if synthetic else "user", tuple(notes), warmup, captured.describe())


def _captured_requests(signatures: Mapping[str, Signature], captured: Captured
                       ) -> dict[str, list[dict[str, np.ndarray]]]:
    """The captured requests' inputs by signature key, each checked against its signature."""
    by_key: dict[str, list[dict[str, np.ndarray]]] = {}
    problems: list[str] = []
    called = sorted({r.signature for r in captured.records})
    if not set(called) & set(signatures):
        raise CaptureSourceError(f"--samples {captured.source}: the captured requests call signature(s) "
                                 f"{', '.join(called)}; the model has {', '.join(signatures)} (a request is replayed "
                                 "on the signature it named)")
    for index, record in enumerate(captured.records):
        if record.signature not in signatures:
            continue
        inputs = record.inputs()
        where = f"captured request {index + 1} ({record.request_id or 'no id'}, signature {record.signature!r})"
        problems += signature_problems(inputs, signatures[record.signature], where)
        by_key.setdefault(record.signature, []).append(inputs)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CaptureSourceError(f"--samples {captured.source} does not fit the model: {problems[0]}{more}")
    return by_key


def golden_inputs(signatures: Mapping[str, Signature], samples: Optional[Samples] = None
                  ) -> tuple[dict[str, dict[str, np.ndarray]], str, tuple[str, ...]]:
    """``(inputs by signature, golden source, notes)``: the user's rows where they fit, else synthetic ones.

    The golden source is ``"user"`` when the samples fed every signature,
    else ``"synthetic"`` (the notes name the synthesized signatures).
    ExportError when samples are given but fit no signature, or do not
    match an input's dtype or shape.
    """
    given = _by_signature(signatures, samples) if samples is not None else {}
    golden, synthetic, notes = {}, [], []
    for key, signature in signatures.items():
        if key in given:
            golden[key] = {name: value[:GOLDEN_ROWS] for name, value in given[key].items()}
            continue
        golden[key] = synthesize_inputs(signature, SYNTHETIC_ROWS, seed=0)
        synthetic.append(key)
    if synthetic:
        notes.append(f"golden inputs of {', '.join(repr(k) for k in synthetic)} are synthetic (made from the "
                     "signature: floats ~N(0,1), integers 0/1, strings 'sample N'); they check that the export "
                     "computes what the model computes, not that its answers make sense. Give real rows with "
                     "--samples / sample_inputs=.")
    if any(len(next(iter(arrays.values()))) > GOLDEN_ROWS for arrays in given.values()):
        notes.append(f"golden inputs keep the first {GOLDEN_ROWS} sample rows.")
    return golden, ("synthetic" if synthetic else "user"), tuple(notes)


def _by_signature(signatures: Mapping[str, Signature], samples: Samples) -> dict[str, dict[str, np.ndarray]]:
    """The samples that fit each signature (by input names), coerced to its dtypes and checked."""
    found: dict[str, dict[str, np.ndarray]] = {}
    errors = []
    for key, signature in signatures.items():
        try:
            arrays = _read(samples, key, signature)
        except ValueError as exc:
            errors.append(str(exc))
            continue
        if arrays is not None:
            found[key] = _coerce(key, signature, arrays)
    if not found:
        detail = "; ".join(errors) if errors else "no signature has inputs named like the samples"
        inputs = "; ".join(f"{k}: {', '.join(s.inputs)}" for k, s in signatures.items())
        raise ExportError(f"the samples fit no signature ({detail}). Signatures and their inputs: {inputs}")
    return found


def _read(samples: Samples, key: str, signature: Signature) -> Optional[dict[str, np.ndarray]]:
    if isinstance(samples, (str, Path)):
        return load_inputs(samples, signature)
    if key in samples and isinstance(samples[key], Mapping):
        return dict(samples[key])
    arrays = {k: v for k, v in samples.items() if not isinstance(v, Mapping)}
    return arrays if set(arrays) == set(signature.inputs) else None


def _coerce(key: str, signature: Signature, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    if set(arrays) != set(signature.inputs):
        raise ExportError(f"samples for signature {key!r} have inputs {sorted(arrays)}, "
                          f"it takes {sorted(signature.inputs)}")
    out = {name: _coerce_one(key, signature.inputs[name], np.asarray(arrays[name]))
           for name in signature.inputs}
    rows = {len(v) for v in out.values()}
    if len(rows) != 1 or 0 in rows:
        raise ExportError(f"samples for signature {key!r} must have one row count > 0 for every input, "
                          f"got {sorted(rows)}")
    return out


def _coerce_one(key: str, spec: TensorSpec, value: np.ndarray) -> np.ndarray:
    if spec.dtype == np.dtype(object):
        if value.dtype.kind not in "OSU":
            raise ExportError(f"samples for signature {key!r} input {spec.name!r} are {value.dtype}, "
                              "the input takes strings")
        flat = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in value.reshape(-1)]
        value = np.array(flat + [b""], dtype=object)[:-1].reshape(value.shape)
    elif not np.can_cast(value.dtype, spec.dtype, casting="same_kind"):
        raise ExportError(f"samples for signature {key!r} input {spec.name!r} are {value.dtype}, "
                          f"the input takes {spec.dtype}")
    else:
        value = value.astype(spec.dtype)
    if not spec.accepts_shape(value.shape):
        raise ExportError(f"samples for signature {key!r} input {spec.name!r} have shape {list(value.shape)}, "
                          f"the input takes {list(spec.dims or [])} (-1: any)")
    return value
