"""WriteDecimal's text is the same whichever way computes it (per value, or over a whole float32 array)."""
from __future__ import annotations

import numpy as np
import pytest

from serving.codec import _decimal

EDGES = [9e6, 999999, 0.5, 3e-4, 3e-5, 555557.5, 1e-45, 3.4028235e38, 1e6, 1e-4, 123456.5, 1234567, 1000000.125,
         99999.95, 999999.5, 0.1, 1e-5, 1e5, 1e9, 1e8, 123456789, 2.5, 3.0, 1e-38, 1.1754944e-38, 16777217]


def float32_samples(rng: np.random.Generator) -> np.ndarray:
    with np.errstate(all="ignore"):
        wide = rng.standard_normal(100_000).astype(np.float32) * (
            np.float32(10.0) ** rng.integers(-44, 38, 100_000).astype(np.float32))
        parts = [wide, rng.random(50_000, dtype=np.float32), np.round(rng.standard_normal(50_000), 3),
                 np.arange(-5000, 5000) / 8, np.array(EDGES), -np.array(EDGES)]
        return np.concatenate([np.asarray(p, np.float32) for p in parts]).astype(np.float32)


def test_the_whole_array_rule_writes_what_the_per_value_rule_writes():
    """Every value the vectorised path is sure of matches ``_word``; it is sure of nearly all of them."""
    values = float32_samples(np.random.default_rng(7))
    values = values[np.isfinite(values) & (values != 0)]
    words, sure = _decimal._vector_words32(values)
    expected = [_decimal._word(v, False) for v in values.tolist()]
    wrong = [(values[i], words[i], expected[i]) for i in np.flatnonzero(sure).tolist() if words[i] != expected[i]]
    assert wrong == []
    assert sure.mean() > 0.5   # values far beyond 1e22 or below 1e-22 are left to the per-value rule
    scores = np.random.default_rng(8).random(10_000, dtype=np.float32)
    assert _decimal._vector_words32(scores)[1].mean() > 0.99


@pytest.mark.parametrize("size", [3, _decimal._VECTOR_MIN + 5])
def test_decimal_words_with_zeros_and_non_finite_values(size):
    """-0.0 is not 0.0; NaN and the infinities are tokens; on both paths."""
    values = np.resize(np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 0.1, 9e6], np.float32), size)
    expected = [_decimal._word(v, False) for v in values.tolist()]
    assert _decimal.decimal_words(values) == expected
    assert expected[:7] == ["0.0", "-0.0", "NaN", "Infinity", "-Infinity", "0.1", "9e+06"][:size]


def float64_samples(rng: np.random.Generator) -> np.ndarray:
    wide = rng.standard_normal(50_000) * 10.0 ** rng.integers(-300, 300, 50_000)
    return np.concatenate([float32_samples(rng).astype(np.float64), wide, rng.random(10_000), np.array(EDGES),
                           [5e-324, 1.7976931348623157e308, 0.1, 1 / 3, 2.0 ** 53 + 2]])


@pytest.mark.parametrize("double", [False, True], ids=["float32", "float64"])
def test_the_list_rule_writes_what_the_per_value_rule_writes(double):
    """``_list_words`` (one %g call, one orjson read-back, one float32 pack per list) matches ``_word`` on every
    value, in lists of every size up to the vector threshold."""
    rng = np.random.default_rng(11)
    values = (float64_samples(rng) if double else float32_samples(rng)).tolist()
    sizes = [1, 2, 10, 97, 1000, _decimal._VECTOR_MIN - 1]
    got, start = [], 0
    while start < len(values):
        size = sizes[len(got) % len(sizes)]
        got.append(_decimal._list_words(values[start:start + size], double))
        start += size
    words = [word for chunk in got for word in chunk]
    expected = [_decimal._word(v, double) for v in values]
    assert len(values) > 200_000
    assert [(v, w, e) for v, w, e in zip(values, words, expected) if w != e] == []


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_decimal_texts_nest_the_words(dtype):
    """``decimal_text`` nests as the array does; ``decimal_row_texts`` is ``decimal_text`` of each row."""
    arr = (np.arange(24).reshape(2, 3, 4) / 7).astype(dtype)
    words = [_decimal._word(v, dtype == np.float64) for v in arr.reshape(-1).tolist()]
    assert _decimal.decimal_text(arr) == str(np.array(words).reshape(2, 3, 4).tolist()).replace("'", "").replace(" ", "")
    for rows in (arr, arr[0], arr[:, 0, 0], np.zeros((3, 0), dtype)):
        assert _decimal.decimal_row_texts(rows) == [_decimal.decimal_text(row) for row in rows]
    assert _decimal.decimal_text(dtype(2.5)) == "2.5"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", [3, _decimal._VECTOR_MIN + 5])
def test_either_byte_order_writes_the_same_text(dtype, size):
    """A big-endian float64 tensor is written with float64's rule (it was once cast to float32 first)."""
    values = np.resize(np.array([0.1, 1 / 3, 2.5, -7e-9], dtype), size)
    assert _decimal.decimal_text(values.astype(values.dtype.newbyteorder(">"))) == _decimal.decimal_text(values)
