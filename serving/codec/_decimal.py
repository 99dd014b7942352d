"""Floats as TF Serving's ``WriteDecimal`` (``util/json_tensor.cc``) writes them in JSON responses.

Six significant digits (``absl::StrCat``, like ``%g``: ``9e+06``, ``3e-05``,
``0.5``); a value that does not read back from them exactly is written with
``max_digits10`` digits (``%.9g`` for float32, ``%.17g`` for float64:
``0.123456702``); ``.0`` is added where the text has neither ``.`` nor ``e``
(``3.0``); ``NaN``, ``Infinity``, ``-Infinity`` for non-finite values.

Formatting is most of the cost of a REST response, so it is done two ways with
one result: below ``_VECTOR_MIN`` values (and for float64) each step of the rule
is one C call over the whole list (every value written with ``%g`` in one format
call, read back by one orjson parse, packed to float32 and unpacked in one call),
only the values that did not read back are written again one by one with
``max_digits10``; for float32 tensors of ``_VECTOR_MIN`` values or
more the same rule in integer arithmetic over the whole array, each value whose
rounding is not certain there (a digit at a tie, a power of ten beyond float64's
exact ones) taken from the per-value rule ``_word``. tests/codec/test_decimal.py
holds both to ``_word`` on 200,000+ values. (A cache of written words was
measured and dropped: it sped up outputs that repeat and slowed never-seen ones,
which real outputs are, by half.)
"""
from __future__ import annotations

import functools
import math
import struct

import numpy as np
import orjson

__all__ = ["decimal_fragment", "decimal_row_texts", "decimal_text", "decimal_words"]


def decimal_fragment(values: np.ndarray | np.floating) -> orjson.Fragment:
    """``values`` in ``WriteDecimal`` text, nested as ``values``, ready for ``json_dumps``."""
    return orjson.Fragment(decimal_text(values).encode())


def decimal_text(values: np.ndarray | np.floating) -> str:
    """``values`` in ``WriteDecimal`` text, nested as ``values`` (a JSON number for a scalar)."""
    arr = _decimal_array(values)
    words = decimal_words(arr)
    if arr.ndim == 0:
        return words[0]
    if arr.ndim == 1:
        return "[" + ",".join(words) + "]"
    return _nested(words, arr.shape, 0)


def decimal_row_texts(values: np.ndarray) -> list[str]:
    """``decimal_text`` of each ``values[i]`` (``values`` has a first dimension), formatting every value once."""
    arr = _decimal_array(values)
    words = decimal_words(arr)
    if arr.ndim == 1:
        return words
    if arr.ndim == 2:
        inner = arr.shape[1]
        return ["[" + ",".join(words[start:start + inner]) + "]" for start in range(0, len(words), inner)] \
            if inner else ["[]"] * arr.shape[0]
    inner = math.prod(arr.shape[1:])
    return [_nested(words, arr.shape[1:], i * inner) for i in range(arr.shape[0])]


def _decimal_array(values: np.ndarray | np.floating) -> np.ndarray:
    arr = np.asarray(values)
    return arr if arr.dtype.type in _FLOATS else arr.astype(np.float32)   # either byte order


_FLOATS = (np.float32, np.float64)


def _nested(words: list[str], shape: tuple[int, ...], start: int) -> str:
    if len(shape) == 1:
        return "[" + ",".join(words[start:start + shape[0]]) + "]"
    inner = math.prod(shape[1:])
    return "[" + ",".join(_nested(words, shape[1:], start + i * inner) for i in range(shape[0])) + "]"


_VECTOR_MIN = 2048   # from about this many float32 values the whole-array rule is cheaper than the list rule


def decimal_words(arr: np.ndarray) -> list[str]:
    """Each value of a float32 or float64 ``arr`` (C order) as ``WriteDecimal`` text."""
    double = arr.dtype.type is np.float64
    flat = arr.reshape(-1)
    if not double and flat.size >= _VECTOR_MIN:
        words, sure = _vector_words32(flat)
        if not sure.all():
            values = flat.tolist()
            for i in np.flatnonzero(~sure).tolist():
                words[i] = _word(values[i], double)
        return words
    return _list_words(flat.tolist(), double)


def _list_words(values: list[float], double: bool) -> list[str]:
    """The rule over a list of values, each step one C call over all of them: every value written with six
    digits at once (``%g``), all read back at once (orjson, correctly rounded; float32: then packed to float32
    and unpacked), the values that did not read back written again with ``max_digits10``. Non-finite values
    go to ``_word``."""
    n = len(values)
    text = ("%g," * n) % tuple(values)
    if "n" in text:                       # "nan", "inf": the %g text of a finite value has no letter n
        return [_word(v, double) for v in values]
    backs = orjson.loads("[" + text[:-1] + "]")
    if double:
        full = "%.17g"
    else:
        floats = _floats32(n)
        try:
            backs = floats.unpack(floats.pack(*backs))
        except OverflowError:             # not for a float32's six digits (FLT_MAX's round down), kept as _word
            return [_word(v, double) for v in values]
        full = "%.9g"
    six = text.split(",")
    words = [word if back == value else full % value for word, back, value in zip(six, backs, values)]
    return [word if "." in word or "e" in word else word + ".0" for word in words]


@functools.cache   # one per list size below _VECTOR_MIN
def _floats32(n: int) -> struct.Struct:
    return struct.Struct(f"={n}f")


_F32 = struct.Struct("<f")
_TOKENS = {math.inf: "Infinity", -math.inf: "-Infinity"}


def _word(value: float, double: bool) -> str:
    """The rule, for one value (a Python float holding a float32's or float64's exact value)."""
    if value != value:  # noqa: PLR0124 - the NaN test, without a call per value on this hot path
        return "NaN"
    if value in _TOKENS:
        return _TOKENS[value]
    word = "%g" % value
    back = float(word)
    if not double and back != value:
        try:
            back = _F32.unpack(_F32.pack(back))[0]
        except OverflowError:
            back = math.nan
    if back != value:
        word = ("%.17g" if double else "%.9g") % value
    return word if "." in word or "e" in word else word + ".0"


_POW10 = 10.0 ** np.arange(23)   # the powers of ten float64 holds exactly
_DIGIT_DIV = 10 ** np.arange(8, -1, -1, dtype=np.int64)


def _scaled(a: np.ndarray, shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a * 10**shift`` with one float64 rounding; exact-power only where ``|shift| <= 22`` (the mask)."""
    p = _POW10[np.minimum(np.abs(shift), 22)]
    return np.where(shift >= 0, a * p, a / p), np.abs(shift) <= 22


def _rounded(a: np.ndarray, e: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``a`` rounded to ``width`` significant digits (an integer), its decimal exponent, and where that is
    certain: the scaled value is off by at most an ulp, so a fraction near one half is not."""
    x, exact = _scaled(a, width - 1 - e)
    sure = exact & (np.abs(x - np.floor(x) - 0.5) > 1e-6)
    digits = np.rint(x).astype(np.int64)
    carry = digits >= 10 ** width
    return np.where(carry, digits // 10, digits), e + carry, sure


def _vector_words32(flat: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The rule over a whole float32 array: the words, and where each is certain (elsewhere a placeholder)."""
    a = np.abs(flat.astype(np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.floor(np.log10(a))
    finite = np.isfinite(e)
    e = np.where(finite, e, 0).astype(np.int64)
    a = np.where(finite, a, 1.0)
    x, exact = _scaled(a, 8 - e)              # log10 may be off by one at a power of ten: fix the exponent
    e = e - (x < 1e8) + (x >= 1e9)
    d6, x6, sure6 = _rounded(a, e, 6)
    d9, x9, sure9 = _rounded(a, e, 9)
    back, exact_back = _scaled(d6.astype(np.float64), x6 - 5)   # float(six-digit text): correctly rounded
    with np.errstate(over="ignore"):
        six = back.astype(np.float32) == np.abs(flat)           # ... then to float32, as the rule reads back
    sure = finite & exact & sure6 & sure9 & exact_back
    precision = np.where(six, 6, 9)
    exponent = np.where(six, x6, x9)
    digits = (np.where(six, d6 * 1000, d9)[:, None] // _DIGIT_DIV) % 10           # nine digit slots
    nonzero = digits != 0
    kept = 9 - np.argmax(nonzero[:, ::-1], axis=1)      # significant digits without trailing zeros
    sci = (exponent < -4) | (exponent >= precision)     # %g's choice
    fixed_int = ~sci & (exponent >= 0)
    fixed_frac = ~sci & (exponent < 0)
    n = flat.size
    none = np.zeros(n, np.uint8)
    cols = []

    def put(mask: np.ndarray, char: str) -> None:
        cols.append(np.where(mask, np.uint8(ord(char)), none))

    put(np.signbit(flat), "-")
    put(fixed_frac, "0")
    put(fixed_frac, ".")
    for i in range(3):
        put(fixed_frac & (i < -exponent - 1), "0")
    for i in range(9):
        shown = (i < kept) | (fixed_int & (i <= exponent))
        cols.append(np.where(shown, (digits[:, i] + 48).astype(np.uint8), none))
        put((fixed_int & (i == exponent)) | (sci & (i == 0) & (kept > 1)), ".")
    put(fixed_int & (kept <= exponent + 1), "0")         # WriteDecimal's ".0"
    put(sci, "e")
    put(sci & (exponent < 0), "-")
    put(sci & (exponent >= 0), "+")
    power = np.abs(exponent)
    cols.append(np.where(sci, (power // 10 + 48).astype(np.uint8), none))
    cols.append(np.where(sci, (power % 10 + 48).astype(np.uint8), none))
    cols.append(np.full(n, ord(","), np.uint8))
    chars = np.stack(cols, axis=1)
    return chars[chars != 0].tobytes().decode("ascii").split(",")[:n], sure
