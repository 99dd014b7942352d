"""Large dense arrays of JSON numbers parsed straight into numpy, without nested Python lists.

Why: a 224x224x3 image in a REST body is ~150,000 numbers in ~50,000 nested
lists. Parsing it to lists (``json_loads``) and stacking them (``np.array``)
cost more than the model's own run, and the lists kept Python's garbage
collector busy (see ``serving.server.heap_freezer``).

``json_loads_dense(body, keep)`` returns what ``json_loads(body)`` returns,
except that each array of numbers of at least ``DENSE_MIN_BYTES`` of text
that is one dense tensor comes back as a ``DenseArray`` (its ``array`` is
int64 or float64, exactly what ``np.array`` of the nested lists would be),
where ``keep(path)`` allows it; elsewhere it is the usual nested lists.

How, with C-speed steps only (no per-number Python code):

1. Runs of number characters, brackets, commas and JSON whitespace are found
   with one regular expression, cut to one bracket-balanced array.
2. The run's punctuation alone (``[``, ``]``, ``,``) must be exactly that of
   the dense shape read along first elements; no number may touch a ``[``
   from the left or a ``]`` from the right. Then every number sits in a leaf
   slot, so the run with its brackets blanked is a flat comma-separated list
   with one field per leaf: orjson parses it (its grammar decides what a
   number is) and ``np.array`` of a flat list is cheap.
3. Each run is replaced in the body by a placeholder string and the rest of
   the document is parsed with ``json_loads``; every placeholder must come
   back as a value, else the body is parsed whole as before.

Anything unusual (strings, ``true``, ``null``, ``NaN``, empty or ragged lists,
integers past int64, a run that fails a check, a placeholder inside a string
or used as a key) leaves the text to ``json_loads``, so results and error
messages are exactly those of the list path; ``DenseArray.value()`` gives the
nested lists when an error must be located.
"""
from __future__ import annotations

import os
import re
from typing import Any, Callable, Optional, Union, cast

import numpy as np
import orjson

from serving import status
from serving.codec._json import JSON, JsonText, json_loads

__all__ = ["DENSE_MIN_BYTES", "DenseArray", "DenseJSON", "json_loads_dense"]

DENSE_MIN_BYTES = 1024

_WHITESPACE = b" \t\n\r"  # JSON's (RFC 8259), not regex \s
_NUMBER_CHARS = b"0123456789.eE+-"
_RUN = re.compile(rb"\[[0-9eE.+\-,\[\] \t\n\r]{%d,}" % (DENSE_MIN_BYTES - 1))
_NUMBERS_TO_ZERO = bytes.maketrans(_NUMBER_CHARS, b"0" * len(_NUMBER_CHARS))
_BRACKETS_TO_SPACE = bytes.maketrans(b"[]", b"  ")
_ZERO, _OPEN, _CLOSE = ord("0"), ord("["), ord("]")
_MAX_DIMS = 32

Path = tuple


class DenseArray(JsonText):
    """A dense array of JSON numbers: its source ``text`` and its ``array`` (int64 or float64).

    ``array`` equals ``np.array(value())`` in dtype, shape and every bit.
    """

    __slots__ = ("array",)

    def __init__(self, text: bytes, array: np.ndarray) -> None:
        super().__init__(text)
        self.array = array

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    def __repr__(self) -> str:
        return f"DenseArray(shape={self.array.shape}, dtype={self.array.dtype})"


DenseJSON = Union[JSON, DenseArray, list["DenseJSON"], dict[str, "DenseJSON"]]
"""A parsed JSON value whose tensor positions may hold a ``DenseArray`` (what ``json_loads_dense`` returns).

Every ``JSON`` value is one (a document with no dense array), so the functions that read a request take both."""


def json_loads_dense(body: bytes | bytearray | memoryview | str,
                     keep: Callable[[Path], bool]) -> DenseJSON:
    """``json_loads(body)`` with each large dense numeric array at a path ``keep`` allows as a ``DenseArray``.

    A path is the tuple of object keys and list indexes from the document
    root. Errors are exactly ``json_loads``'s.
    """
    if isinstance(body, (memoryview, bytearray)):
        body = bytes(body)
    if isinstance(body, str) or len(body) < DENSE_MIN_BYTES:
        return json_loads(body)
    arrays: list[tuple[int, int, DenseArray]] = []
    for match in _RUN.finditer(body):
        found = _dense_run(body[match.start():match.end()])
        if found is not None:
            arrays.append((match.start(), match.start() + len(found.text), found))
    if not arrays:
        return json_loads(body)
    nonce = os.urandom(8).hex()
    pieces, last = [], 0
    for index, (start, end, _) in enumerate(arrays):
        pieces += [body[last:start], b'"\\u0000dense:%s:%d"' % (nonce.encode(), index)]
        last = end
    pieces.append(body[last:])
    try:
        skeleton = json_loads(b"".join(pieces))
    except status.InvalidArgument:  # the whole body gives the exact message and offset
        return json_loads(body)
    placed, complete = _place(skeleton, f"\x00dense:{nonce}:", [found for _, _, found in arrays], keep)
    return placed if complete else json_loads(body)


def _place(document: JSON, prefix: str, arrays: list[DenseArray],
           keep: Callable[[Path], bool]) -> tuple[DenseJSON, bool]:
    """``document`` with each placeholder string replaced, and True if each was found once as a value."""
    found = 0

    def substitute(value: DenseJSON, path: Path) -> DenseJSON:
        nonlocal found
        if not (isinstance(value, str) and value.startswith(prefix)):
            return value
        found += 1
        array = arrays[int(value[len(prefix):])]
        return array if keep(path) else array.value()

    root = substitute(document, ())
    stack: list[tuple[DenseJSON, Path]] = [(root, ())]
    while stack:
        container, path = stack.pop()
        items: list[tuple[Any, DenseJSON]]
        if isinstance(container, dict):
            items = list(container.items())
        elif isinstance(container, list):
            items = list(enumerate(container))
        else:
            continue
        for key, value in items:
            child = substitute(value, path + (key,))
            if child is not value:
                # The skeleton is json_loads's new document, held only here: its lists and dicts (JSON's) are
                # made DenseJSON's in place, a DenseArray where its placeholder string was.
                cast("dict[Any, DenseJSON] | list[DenseJSON]", container)[key] = child
            elif isinstance(value, (dict, list)):
                stack.append((value, path + (key,)))
    return root, found == len(arrays)


def _dense_run(run: bytes) -> Optional[DenseArray]:
    """The dense array at the start of ``run`` (one of ``_RUN``'s matches), or None."""
    run = run.rstrip(_WHITESPACE + b",")
    marks = run.translate(_NUMBERS_TO_ZERO, _WHITESPACE)
    punctuation = marks.translate(None, b"0")
    excess = punctuation.count(b"]") - punctuation.count(b"[")
    if excess:  # the run went on past its array (into an enclosing list): cut it there
        cut = _cut(run, excess)
        if cut is None:
            return None
        run = cut
        marks = run.translate(_NUMBERS_TO_ZERO, _WHITESPACE)
        punctuation = marks.translate(None, b"0")
    shape = _shape_of(punctuation)
    if shape is None or punctuation != _punctuation(shape) or _number_touches_bracket(marks):
        return None
    # np.array would find float64 if any number is written with a fraction or exponent, else int64
    # (or fail past int64): naming the dtype skips that search, with the same values.
    dtype = np.float64 if b"." in run or b"e" in run or b"E" in run else np.int64
    try:
        array = np.array(orjson.loads(b"[" + run.translate(_BRACKETS_TO_SPACE) + b"]"), dtype=dtype)
    except (orjson.JSONDecodeError, OverflowError, TypeError, ValueError):
        return None
    if array.size != int(np.prod(shape)):
        return None
    return DenseArray(run, array.reshape(shape))


def _cut(run: bytes, excess: int) -> Optional[bytes]:
    """``run`` without its ``excess`` trailing closers (and the commas and spaces between); None if not so."""
    if excess < 0:
        return None
    for _ in range(excess):
        if not run.endswith(b"]"):
            return None
        run = run[:-1].rstrip(_WHITESPACE + b",")
    return run if run.endswith(b"]") else None


def _shape_of(punctuation: bytes) -> Optional[tuple[int, ...]]:
    """The shape read along first elements from the brackets and commas of an array, if plausible."""
    rank = len(punctuation) - len(punctuation.lstrip(b"["))
    if not 0 < rank <= _MAX_DIMS:
        return None
    first_close = punctuation.find(b"]")
    if first_close < 0:
        return None
    length = first_close - rank + 2  # the first innermost list: "[" + ","*(d-1) + "]", d+1 bytes
    shape = [length - 1]
    for level in range(rank - 2, -1, -1):
        closers = rank - level
        start = punctuation.find(b"]" * closers)
        if start < 0:
            return None
        outer = start + closers - level  # "[" + d lists joined by "," + "]", from index `level`
        size, remainder = divmod(outer - 1, length + 1)
        if remainder or size < 1:
            return None
        shape.insert(0, size)
        length = outer
    return tuple(shape)


def _punctuation(shape: tuple[int, ...]) -> bytes:
    """The brackets and commas of a dense array of ``shape`` (all dimensions >= 1)."""
    text = b"[" + b"," * (shape[-1] - 1) + b"]"
    for size in reversed(shape[:-1]):
        text = b"[" + b",".join([text] * size) + b"]"
    return text


def _number_touches_bracket(marks: bytes) -> bool:
    """True if a number (``0`` in ``marks``) directly precedes a ``[`` or follows a ``]``."""
    chars = np.frombuffer(marks, np.uint8)
    opens = np.flatnonzero(chars[1:] == _OPEN)
    closes = np.flatnonzero(chars[:-1] == _CLOSE)
    return bool((chars[opens] == _ZERO).any() or (chars[closes + 1] == _ZERO).any())
