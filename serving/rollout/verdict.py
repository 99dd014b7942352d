"""Do a canary's answers agree with stable's? One rule per output, chosen by what the output is.

:func:`judge_outputs` is the one entry point: the offline analysis (inputs
replayed to both sides) and the live one (answers recorded from traffic) both
hand it the answers of the two sides, row-aligned, and get the checks back.

A retrain (another seed, more epochs, new data: other weights) is judged as a
user means "the canary agrees" (``mode="retrain"``):

- ``agreement:<output>`` (kind ``top1``): class outputs. The share of rows whose
  top-1 class is the same on both sides, at least ``min_agreement``. An output
  is a class output when the manifest names it (``top1_outputs``), when its
  rows are probabilities (float, last dimension > 1, each row >= 0 summing to
  1: a softmax), when it is the ``scores`` of a ``classes``/``scores`` pair or
  of a classify signature, or its name says logits/probabilities, and when it
  is a class id or label itself (an int or string output, one per row).
- ``distribution:<output>`` (kind ``distribution``): every other float output
  (scores, regressions, sigmoids). A retrain moves each row's value a little;
  a broken version moves them by as much as the output varies. With ``spread``
  the standard deviation of stable's values, FAIL when the 90th percentile of
  the per-row ``|canary - stable|`` exceeds ``max_row_diff`` x spread, when
  the mean difference (a bias) exceeds ``max_shift`` x spread, or when the two
  sides' values differ as distributions (two-sample Kolmogorov-Smirnov
  statistic over the critical value at significance 0.001).
- ``equal:<output>``: other outputs (strings per class, bools): the same values.
- ``finite:<output>``: FAIL whenever the canary answers NaN or infinity where
  stable answers a number (in any mode: NaN would compare false with every limit).
- ``ignored:<output>``: a float vector per row that is not probabilities (an
  embedding): another training's coordinates are another basis; reported, not
  judged, unless ``kinds`` says otherwise.

Variants of the same weights (an XLA or TF-TRT build, a re-export) are held to
element-wise tolerance instead (``mode="elementwise"``, kind ``elementwise``,
check ``tolerance:<output>``): ``|canary - stable| <= atol + rtol * |stable|``.
``mode="auto"`` picks it when the two versions' variables hold the same
tensors (:func:`weights_digest`), else ``retrain``. ``kinds`` overrides the
kind of any output (``top1``, ``distribution``, ``elementwise``, ``equal``,
``ignore``). docs/rollout.md gives the numbers behind the defaults.
"""
from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from serving import codec

__all__ = ["PASS", "FAIL", "INCONCLUSIVE", "KINDS", "MODES", "Check", "Rules", "Context", "worst", "output_kind",
           "judge_outputs", "least_agreement", "weights_digest", "same_weights"]

PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"
_ORDER = {PASS: 0, INCONCLUSIVE: 1, FAIL: 2}
KINDS = ("top1", "distribution", "elementwise", "equal", "ignore")
MODES = ("auto", "retrain", "elementwise")
CLASSIFY_METHOD = "tensorflow/serving/classify"
_CLASS_NAMES = ("logits", "logit", "scores", "probabilities", "probs", "class_scores", "softmax")
_KS_C = 1.949  # c(alpha) of the two-sample KS critical value c * sqrt((n + m) / (n m)) at alpha = 0.001
_MIN_ROWS = 8  # rows below which a distribution is not judged
AGREEMENT_ALPHA = 0.01  # the top-1 test's significance: a faithful retrain FAILs 1 time in 100


@dataclass(frozen=True)
class Check:
    name: str
    verdict: str
    value: codec.JSON
    threshold: codec.JSON
    detail: str = ""


def worst(verdicts: Iterable[str]) -> str:
    return max(verdicts, key=_ORDER.__getitem__, default=PASS)


@dataclass(frozen=True)
class Rules:
    """What the outputs are held to (the CLI's flags; docs/rollout.md says why these defaults)."""

    mode: str = "auto"              # auto: elementwise for the same weights, else retrain
    min_agreement: float = 0.95     # top-1: the share of classes a faithful retrain keeps (at least)
    max_row_diff: float = 1.0       # p90 of |canary - stable| per row, in stable's standard deviations
    max_shift: float = 0.25         # |mean(canary - stable)|, in stable's standard deviations
    atol: Optional[float] = None    # elementwise: None: the manifest's tolerance, else 1e-5
    rtol: Optional[float] = None    # elementwise: None: the manifest's tolerance, else 1e-4
    kinds: Mapping[str, str] = field(default_factory=dict)  # per output: one of KINDS, overriding detection

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        bad = {name: kind for name, kind in self.kinds.items() if kind not in KINDS}
        if bad:
            raise ValueError(f"an output's kind is one of {', '.join(KINDS)}, got {bad}")


@dataclass(frozen=True)
class Context:
    """What is known of the model besides its answers: from the manifest, and whether the weights are the same.

    ``same_weights``: None when unknown; ``why`` says how it was decided (printed in the checks).
    """

    top1_outputs: Sequence[str] = ()
    method_name: Optional[str] = None
    tolerance: Mapping[str, float] = field(default_factory=dict)
    same_weights: Optional[bool] = None
    why: str = ""


def _is_text(a: np.ndarray) -> bool:
    return a.dtype.kind in "SUO"


def _is_distribution(a: np.ndarray) -> bool:
    if a.dtype.kind != "f" or a.ndim < 2 or a.shape[-1] < 2 or a.size == 0:
        return False
    rows = a.reshape(-1, a.shape[-1]).astype(np.float64)
    slack = 1e-2 if a.dtype.itemsize <= 2 else 1e-3  # float16/bfloat16 sums are coarser
    return bool(np.all(rows >= -slack) and np.all(np.abs(rows.sum(axis=1) - 1.0) <= slack))


def output_kind(name: str, stable: Mapping[str, np.ndarray], rules: Rules = Rules(),
                context: Context = Context(), mode: str = "retrain") -> tuple[str, str]:
    """``(kind, why)`` of output ``name`` given stable's answers (all outputs: siblings matter)."""
    if name in rules.kinds:
        return rules.kinds[name], "asked"
    a = stable[name]
    if mode == "elementwise":
        return ("elementwise", "same weights") if a.dtype.kind in "fiu" else ("equal", "same weights")
    if name in context.top1_outputs:
        return "top1", "the manifest's class output"
    if a.dtype.kind in "iub" and a.ndim in (1, 2):
        return ("top1", "a class id per row") if a.dtype.kind != "b" else ("equal", "booleans")
    if _is_text(a):
        return ("top1", "a label per row") if a.ndim == 1 else ("equal", "labels")
    if a.dtype.kind != "f":
        return "equal", f"dtype {a.dtype}"
    if a.ndim >= 2 and a.shape[-1] > 1:
        if _is_distribution(a):
            return "top1", "rows sum to 1 (softmax)"
        if any(_is_text(other) and other.shape == a.shape for k, other in stable.items() if k != name):
            return "top1", "scores of a classes/scores pair"
        if name.lower() in _CLASS_NAMES or "logit" in name.lower() or context.method_name == CLASSIFY_METHOD:
            return "top1", "named as class scores"
        values = a.astype(np.float64)
        if a.size and not (np.all(values >= 0.0) and np.all(values <= 1.0)):
            # An embedding: another training's coordinates are another basis, not a worse answer.
            return "ignore", ("a vector per row, not probabilities (an embedding?): its coordinates are not "
                              f"comparable between weights; --output {name}=distribution judges it")
        return "distribution", "per-label probabilities"
    return "distribution", "a score or regression"


def _stack(answers: Sequence[Mapping[str, np.ndarray]], name: str) -> np.ndarray:
    return np.concatenate([np.asarray(a[name]) for a in answers])


def _ks(s: np.ndarray, c: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the two empirical CDFs."""
    s, c = np.sort(s), np.sort(c)
    grid = np.concatenate([s, c])
    return float(np.max(np.abs(np.searchsorted(s, grid, side="right") / len(s)
                               - np.searchsorted(c, grid, side="right") / len(c)), initial=0.0))


def least_agreement(rows: int, expected: float, alpha: float = AGREEMENT_ALPHA) -> float:
    """The least top-1 agreement over ``rows`` rows that a version keeping ``expected`` of the classes shows
    more often than ``alpha``: ``1 - k/rows`` for the most changed rows ``k`` with P(Binomial(rows, 1 - expected)
    >= k) >= alpha (a one-sided binomial test)."""
    if rows <= 0:
        return 0.0
    q = min(max(1.0 - expected, 0.0), 1.0)
    if q == 0.0:
        return 1.0
    if q == 1.0:
        return 0.0
    # P(X = j) by the recurrence P(j+1) = P(j) (n - j) / (j + 1) q / (1 - q), in logs (rows may be large)
    log_p = [rows * math.log1p(-q)]
    for j in range(rows):
        log_p.append(log_p[-1] + math.log(rows - j) - math.log(j + 1) + math.log(q) - math.log1p(-q))
    tail, allowed = 0.0, rows
    for k in range(rows, -1, -1):  # tail = P(X >= k)
        tail += math.exp(log_p[k])
        if tail >= alpha:
            allowed = k
            break
    return 1.0 - allowed / rows


def _top1(name: str, s: np.ndarray, c: np.ndarray, rules: Rules, why: str, row: dict) -> Check:
    if s.dtype.kind in "fc" and s.ndim >= 2:
        s_class = np.argmax(s.reshape(-1, s.shape[-1]), axis=1)
        c_class = np.argmax(c.reshape(-1, c.shape[-1]), axis=1)
    else:
        s_class, c_class = (s[:, 0], c[:, 0]) if s.ndim == 2 else (s, c)
    agree = s_class == c_class
    n = int(agree.size)
    value = float(np.mean(agree)) if n else 1.0
    flipped = n - int(np.count_nonzero(agree))
    least = least_agreement(n, rules.min_agreement)
    row.update(top1_agreement=value, rows=n, changed_class=flipped, least_agreement=least)
    extra = f"; max abs diff {row['max_abs']:.3g}" if "max_abs" in row else ""
    detail = (f"{why}: {flipped} of {n} rows changed class (a version keeping {rules.min_agreement:.0%} of them "
              f"shows >= {least:.3g} on {n} rows, 99 times in 100){extra}")
    verdict = FAIL if value < least else PASS
    if verdict == PASS and flipped and n < 2:  # one row cannot tell a broken version from a borderline row
        verdict, detail = INCONCLUSIVE, f"{why}: {flipped} of {n} rows changed class: too few rows to tell"
    return Check(f"agreement:{name}", verdict, value, least, detail)


def _distribution(name: str, s: np.ndarray, c: np.ndarray, rules: Rules, atol: float, why: str,
                  row: dict) -> Check:
    s64, c64 = s.astype(np.float64).ravel(), c.astype(np.float64).ravel()
    n = s64.size
    if n < _MIN_ROWS:
        return Check(f"distribution:{name}", INCONCLUSIVE, n, _MIN_ROWS, f"{why}: too few values to compare")
    spread = float(np.std(s64))
    scale = spread if spread > atol else max(atol, float(np.max(np.abs(s64), initial=0.0)) or 1.0)
    d = c64 - s64
    p90 = float(np.quantile(np.abs(d), 0.9)) / scale
    shift = abs(float(np.mean(d))) / scale
    ks, ks_limit = _ks(s64, c64), _KS_C * math.sqrt(2.0 / n)
    row.update(spread=spread, row_diff_p90=p90, shift=shift, ks=ks, ks_limit=ks_limit)
    over = [f"p90 row diff {p90:.3g} > {rules.max_row_diff:g}" if p90 > rules.max_row_diff else "",
            f"mean shift {shift:.3g} > {rules.max_shift:g}" if shift > rules.max_shift else "",
            f"KS {ks:.3g} > {ks_limit:.3g}" if ks > ks_limit else ""]
    over = [o for o in over if o]
    detail = (f"{why}: {n} values, spread (sd) {spread:.3g}; in sds: p90 |diff| {p90:.3g}, mean shift {shift:.3g}; "
              f"KS {ks:.3g} (limit {ks_limit:.3g})")
    return Check(f"distribution:{name}", FAIL if over else PASS, p90, rules.max_row_diff,
                 detail + (f"; over: {', '.join(over)}" if over else ""))


def _elementwise(name: str, s: np.ndarray, c: np.ndarray, atol: float, rtol: float, why: str, row: dict) -> Check:
    s64, c64 = s.astype(np.float64), c.astype(np.float64)
    close = bool(np.all(np.abs(c64 - s64) <= atol + rtol * np.abs(s64)))
    extra = f"; top-1 agreement {row['top1_agreement']:.3g}" if "top1_agreement" in row else ""
    return Check(f"tolerance:{name}", PASS if close else FAIL, row["max_abs"], f"{atol:g}+{rtol:g}*|x|",
                 f"{why}: max rel {row['max_rel']:.3g}{extra}")


def judge_outputs(stable: Sequence[Optional[Mapping[str, np.ndarray]]],
                  canary: Sequence[Optional[Mapping[str, np.ndarray]]], rules: Rules = Rules(),
                  context: Context = Context()) -> tuple[list[Check], dict[str, dict[str, codec.JSON]]]:
    """The output checks and, per output, the numbers behind them.

    ``stable[i]`` and ``canary[i]`` are the two sides' answers to the same request (a dict of arrays by
    output name, batch first), None where a side did not answer (the pair is left out).
    """
    pairs: list[tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray]]] = [
        (s, c) for s, c in zip(stable, canary) if s is not None and c is not None]
    if not pairs:
        return [], {}
    mode = rules.mode
    if mode == "auto":
        mode = "elementwise" if context.same_weights else "retrain"
    atol = rules.atol if rules.atol is not None else context.tolerance.get("atol", 1e-5)
    rtol = rules.rtol if rules.rtol is not None else context.tolerance.get("rtol", 1e-4)
    first = {name: _stack([p[0] for p in pairs], name) for name in pairs[0][0]}
    checks: list[Check] = []
    numbers: dict[str, dict[str, codec.JSON]] = {}
    for name in sorted(first):
        s = first[name]
        if any(name not in p[1] for p in pairs):
            checks.append(Check(f"output:{name}", FAIL, None, None, "the canary does not return this output"))
            continue
        c = _stack([p[1] for p in pairs], name)
        if s.shape != c.shape:
            checks.append(Check(f"output:{name}", FAIL, str(c.shape), str(s.shape), "shapes differ"))
            continue
        kind, why = output_kind(name, first, rules, context, mode)
        row: dict[str, codec.JSON] = {"kind": kind}
        numbers[name] = row
        if s.dtype.kind in "fiub" and c.dtype.kind in "fiub":
            diff = np.abs(c.astype(np.float64) - s.astype(np.float64))
            row["max_abs"] = float(diff.max(initial=0.0))
            row["max_rel"] = float((diff / (np.abs(s.astype(np.float64)) + atol)).max(initial=0.0))
        numeric = "max_abs" in row
        if s.dtype.kind == "f" and c.dtype.kind == "f":
            broken = int(np.count_nonzero(~np.isfinite(c) & np.isfinite(s)))
            row["non_finite"] = broken
            if broken:  # NaN compares false with every limit: it would pass them all
                checks.append(Check(f"finite:{name}", FAIL, broken, 0,
                                    f"the canary returns NaN or infinity in {broken} values where stable does not"))
                continue
        if kind == "ignore":
            checks.append(Check(f"ignored:{name}", PASS, None, None, "not judged" + (", as asked" if why == "asked"
                                                                                      else f": {why}")))
        elif kind == "top1":
            checks.append(_top1(name, s, c, rules, why, row))
        elif kind == "distribution" and numeric:
            checks.append(_distribution(name, s, c, rules, atol, why, row))
        elif kind == "elementwise" and numeric:
            if s.dtype.kind == "f" and s.ndim >= 2 and s.shape[-1] > 1 and (name in context.top1_outputs
                                                                           or _is_distribution(s)):
                _top1(name, s, c, rules, why, row)  # the agreement as a number beside the tolerance
            checks.append(_elementwise(name, s, c, atol, rtol, why, row))
        else:
            same = bool(np.array_equal(s, c))
            checks.append(Check(f"equal:{name}", PASS if same else FAIL, same, True, why))
    return checks, numbers


# --- the same weights? ----------------------------------------------------------------------------

_TABLE_MAGIC = 0xDB4775248B80FB57
_OBJECT_GRAPH = b"_CHECKPOINTABLE_OBJECT_GRAPH"


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i
        shift += 7


def _block_entries(data: bytes, offset: int, size: int) -> Iterable[tuple[bytes, bytes]]:
    """The (key, value) entries of one uncompressed table block (LevelDB's format, as TensorFlow's table)."""
    if data[offset + size] != 0:
        raise ValueError("compressed table block")
    block = data[offset:offset + size]
    (restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    end, i, key = len(block) - 4 - 4 * restarts, 0, b""
    while i < end:
        shared, i = _varint(block, i)
        unshared, i = _varint(block, i)
        length, i = _varint(block, i)
        key = key[:shared] + block[i:i + unshared]
        i += unshared
        yield key, block[i:i + length]
        i += length


def _entry_digest(value: bytes) -> tuple[int, int, int]:
    """(dtype, size, crc32c) of a BundleEntryProto (tensor_bundle.proto: fields 1, 5 and 6)."""
    dtype = size = crc = i = 0
    while i < len(value):
        key, i = _varint(value, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(value, i)
            dtype, size = (v, size) if number == 1 else (dtype, v) if number == 5 else (dtype, size)
        elif wire == 5:
            (v,) = struct.unpack_from("<I", value, i)
            i += 4
            crc = v if number == 6 else crc
        elif wire == 1:
            i += 8
        elif wire == 2:
            n, i = _varint(value, i)
            i += n
        else:
            raise ValueError(f"unexpected wire type {wire}")
    return dtype, size, crc


def weights_digest(version_dir: Path) -> Optional[str]:
    """A digest of the tensors a SavedModel's variables hold, whatever their names: the sorted (dtype, size,
    CRC32C of the bytes) of every variable in ``variables/variables.index``; the object graph is left out, so
    a re-export or an XLA variant of the same weights has the same digest. None when it cannot be read."""
    index = Path(version_dir) / "variables" / "variables.index"
    try:
        data = index.read_bytes()
        if len(data) < 48 or struct.unpack_from("<Q", data, len(data) - 8)[0] != _TABLE_MAGIC:
            return None
        footer = data[-48:]
        _, j = _varint(footer, 0)
        _, j = _varint(footer, j)  # the metaindex block's handle
        index_offset, j = _varint(footer, j)
        index_size, j = _varint(footer, j)
        entries = []
        for _, handle in _block_entries(data, index_offset, index_size):
            offset, k = _varint(handle, 0)
            size, _ = _varint(handle, k)
            entries += [_entry_digest(v) for key, v in _block_entries(data, offset, size)
                        if key and not key.startswith(_OBJECT_GRAPH)]
    except (OSError, ValueError, IndexError, struct.error):
        return None
    if not entries:
        return None
    return hashlib.sha256(repr(sorted(entries)).encode()).hexdigest()


def same_weights(stable_dir: Optional[Path], canary_dir: Optional[Path]) -> tuple[Optional[bool], str]:
    """Whether two version directories hold the same weights, and how that was decided."""
    if stable_dir is None or canary_dir is None:
        return None, "a version directory is unknown"
    a, b = weights_digest(stable_dir), weights_digest(canary_dir)
    if a is None or b is None:
        return None, "a version's variables could not be read"
    if a == b:
        return True, f"versions {stable_dir.name} and {canary_dir.name} hold the same weights"
    return False, f"versions {stable_dir.name} and {canary_dir.name} hold different weights"
