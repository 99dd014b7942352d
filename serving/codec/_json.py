"""JSON text <-> Python values, with TF Serving's non-finite numbers.

TF Serving reads and writes ``NaN``, ``Infinity`` and ``-Infinity`` (rapidjson
``kParseNanAndInfFlag``; ``WriteDecimal``), which strict JSON lacks. orjson is
the fast path both ways; the standard library parses documents orjson rejects
only because of those tokens, and non-finite floats are written as raw tokens.
Integers are read as rapidjson reads them: int64/uint64 stay integers, larger
ones become doubles, and one too big for a double is an error (never Python's
integer-digit limit). Text is read as rapidjson reads it: a lone surrogate
escape (``"\\ud800"``) is "The surrogate pair in string is invalid", and
bytes that are not UTF-8 are "Invalid encoding in string", both 400; so no
parsed string is ever text that cannot be written back as UTF-8.
"""
from __future__ import annotations

import json
import math
import re
import sys
from typing import Optional, Union

import numpy as np
import orjson

from serving import status

__all__ = ["JSON", "MAX_JSON_DEPTH", "JsonText", "json_loads", "json_dumps", "json_type_name", "json_value_string"]

JSON = Union[None, bool, int, float, str, list["JSON"], dict[str, "JSON"]]
"""A parsed JSON value: what ``json_loads`` returns (``json_dumps`` takes numpy values besides)."""

# orjson's fixed limit; deeper documents are rejected, never recursed into.
MAX_JSON_DEPTH = 1024

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY
_INT64_MIN, _UINT64_MAX = -2**63, 2**64 - 1
_DOUBLE_MAX_DIGITS = len(str(int(sys.float_info.max)))
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_FRAGMENTS = {token: orjson.Fragment(token) for token in (b"NaN", b"Infinity", b"-Infinity")}


class JsonText:
    """A JSON value kept as its source ``text`` until needed: ``value()`` parses it.

    ``json_dumps`` (and so ``json_value_string``) writes the parsed value, so a
    document holding one reads in messages exactly as the all-parsed document.
    """

    __slots__ = ("text",)

    def __init__(self, text: bytes) -> None:
        self.text = text

    def value(self) -> JSON:
        return json_loads(self.text)


def json_loads(body: bytes | bytearray | memoryview | str) -> JSON:
    """Parse a JSON document; ``NaN``/``Infinity``/``-Infinity`` are accepted.

    Raises ``status.InvalidArgument`` ("JSON Parse error: ...", TF Serving's
    prefix) for an empty or malformed document, invalid UTF-8, a lone UTF-16
    surrogate, or arrays and objects nested deeper than ``MAX_JSON_DEPTH`` --
    never RecursionError or UnicodeError.
    """
    if isinstance(body, memoryview):
        body = body.tobytes()
    if not body or not body.strip():
        raise status.InvalidArgument("JSON Parse error: The document is empty")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if "recursion" in str(exc):
            raise _too_deep(exc.pos) from None
        if "surrogate in string" in str(exc):   # orjson: "no low surrogate in string", ...
            raise _bad_surrogate(f" at offset: {exc.pos}") from None
    return _stdlib_loads(body)


# The standard library's messages -> rapidjson's (GetParseError_En), which TF Serving sends.
_RAPIDJSON_MESSAGES = (
    ("Expecting value", "Invalid value."),
    ("Expecting property name enclosed in double quotes", "Missing a name for object member."),
    ("Expecting ':' delimiter", "Missing a colon after a name of object member."),
    ("Extra data", "The document root must not be followed by other values."),
    ("Unterminated string", "Missing a closing quotation mark in string."),
    ("Invalid control character", "Invalid encoding in string."),
    ("Invalid \\uXXXX escape", "Incorrect hex digit after \\u escape in string."),
    ("Invalid \\escape", "Invalid escape character in string."),
)


def _rapidjson_message(exc: json.JSONDecodeError) -> str:
    """rapidjson's words for the error ``exc`` reports (its offsets may differ by a character or so)."""
    if exc.msg.startswith("Expecting ',' delimiter"):
        return ("Missing a comma or '}' after an object member." if _innermost_open(exc.doc, exc.pos) == "{"
                else "Missing a comma or ']' after an array element.")
    for python, rapidjson in _RAPIDJSON_MESSAGES:
        if exc.msg.startswith(python):
            return rapidjson
    return "Unspecific syntax error."


def _innermost_open(doc: str, pos: int) -> str:
    """The bracket (``[`` or ``{``) still open at ``pos`` of ``doc``, strings skipped."""
    stack: list[str] = []
    in_string = escaped = False
    for char in doc[:pos]:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            stack.append(char)
        elif char in "]}" and stack:
            stack.pop()
    return stack[-1] if stack else ""


def _bad_surrogate(where: str = "") -> status.InvalidArgument:
    return status.InvalidArgument(f"JSON Parse error: The surrogate pair in string is invalid.{where}")


def _too_deep(offset: Optional[int]) -> status.InvalidArgument:
    where = "" if offset is None else f" at offset: {offset}"
    return status.InvalidArgument(
        f"JSON Parse error: arrays or objects nested deeper than {MAX_JSON_DEPTH} levels{where}")


def _parse_int(text: str) -> int | float:
    """rapidjson's integers: int64/uint64 as they are, larger as double, beyond a double an error."""
    if len(text.lstrip("-")) > _DOUBLE_MAX_DIGITS:  # before int(): Python refuses over 4300 digits
        raise _too_big()
    value = int(text)
    if _INT64_MIN <= value <= _UINT64_MAX:
        return value
    try:
        return float(value)
    except OverflowError:
        raise _too_big() from None


def _too_big() -> status.InvalidArgument:
    return status.InvalidArgument("JSON Parse error: Number too big to be stored in double.")


def _stdlib_loads(body: bytes | bytearray | memoryview | str) -> JSON:
    """The documents orjson refuses for their ``NaN``/``Infinity`` tokens (and its errors' wording)."""
    try:
        value = json.loads(body, parse_int=_parse_int)
    except RecursionError:
        raise _too_deep(None) from None
    except json.JSONDecodeError as exc:
        raise status.InvalidArgument(
            f"JSON Parse error: {_rapidjson_message(exc)} at offset: {exc.pos}") from None
    except UnicodeDecodeError as exc:
        raise status.InvalidArgument(f"JSON Parse error: Invalid encoding in string. at offset: {exc.start}") from None
    if _may_hold_surrogates(body):
        _reject_surrogates(value)
    return value


def _may_hold_surrogates(body: bytes | bytearray | memoryview | str) -> bool:
    """A C-speed scan: only a body with a surrogate escape (or, as ``str``, any non-ASCII) needs the walk."""
    if isinstance(body, str):
        return not body.isascii()
    return _SURROGATE_ESCAPE.search(body) is not None


def _reject_surrogates(value: JSON) -> None:
    """``_bad_surrogate`` when a string or key of the parsed document is not UTF-8 text (a lone surrogate)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and not item.isascii():
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise _bad_surrogate() from None


def json_dumps(obj: object) -> bytes:
    """Compact JSON bytes of ``obj``; numpy arrays and scalars may appear anywhere.

    Non-finite floats are written ``NaN``/``Infinity``/``-Infinity`` as TF
    Serving writes them. Finite float32 values use their shortest float32
    form (0.1, not 0.10000000149011612). ``bytes`` are written as UTF-8 text
    (invalid sequences replaced); use ``{"b64": ...}`` for binary data.
    """
    return orjson.dumps(_prepare(obj), default=_default, option=_OPTIONS)


def _prepare(obj: object) -> object:
    if isinstance(obj, np.ndarray):
        return _prepare_array(obj)
    if isinstance(obj, (float, np.floating)):
        return _non_finite(obj) if not math.isfinite(obj) else obj
    if isinstance(obj, dict):
        return {k: _prepare(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_prepare(v) for v in obj]
    return obj


def _non_finite_token(value: float) -> bytes:
    if math.isnan(value):
        return b"NaN"
    return b"Infinity" if value > 0 else b"-Infinity"


def _non_finite(value: float) -> orjson.Fragment:
    return _FRAGMENTS[_non_finite_token(value)]


def _prepare_array(arr: np.ndarray) -> object:
    if arr.ndim == 0:
        return _prepare(arr[()])
    kind = arr.dtype.kind
    if kind not in "fiub":
        return _prepare(arr.tolist())
    arr = np.ascontiguousarray(arr)
    if kind != "f":
        return arr
    finite = np.isfinite(arr)
    if finite.all():
        return arr
    return orjson.Fragment(_array_with_non_finite(arr, finite))


def _array_with_non_finite(arr: np.ndarray, finite: np.ndarray) -> bytes:
    # orjson writes every non-finite value as null; a numeric array has no other
    # null, so the k-th null is the k-th non-finite value in C order.
    parts = orjson.dumps(arr, option=_OPTIONS).split(b"null")
    tokens = [_non_finite_token(v) for v in arr[~finite].tolist()]
    out = [parts[0]]
    for token, part in zip(tokens, parts[1:]):
        out += [token, part]
    return b"".join(out)


def _default(obj: object) -> object:
    if isinstance(obj, JsonText):
        return obj.value()
    if isinstance(obj, np.ndarray):
        return _prepare_array(obj)
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj).decode("utf-8", errors="replace")
    if isinstance(obj, np.generic):
        return _prepare(obj.item())
    raise TypeError(f"Type is not JSON serializable: {type(obj).__name__}")


def json_type_name(value: object) -> str:
    """rapidjson's name of a parsed JSON value's type (for TF Serving's messages)."""
    if value is None:
        return "Null"
    if value is True:
        return "True"
    if value is False:
        return "False"
    if isinstance(value, dict):
        return "Object"
    if isinstance(value, list):
        return "Array"
    if isinstance(value, str):
        return "String"
    return "Number"


_SHOWN = 256


def json_value_string(value: object) -> str:
    """A parsed JSON value as text for an error message, cut at 256 chars."""
    try:
        text = json_dumps(value).decode("utf-8")
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."
