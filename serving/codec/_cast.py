"""The one rule for turning a caller's value into a signature input's dtype, before it is sent.

``cast_to_spec(name, value, spec)`` takes a numpy array, a numpy scalar, or
Python lists and scalars, and returns an array of ``spec``'s dtype, or raises
``status.InvalidArgument`` naming the input, the value's dtype, the input's
dtype and the first offending value. A cast happens only where it keeps the
value, as TF Serving's REST API types JSON numbers (``util/json_tensor.cc``):

- float -> float: any value within the target's range (rounding to the
  nearest float32 is fine, as a JSON decimal is rounded); one beyond it is an
  overflow. NaN and infinities stay what they are.
- int -> int: within the target's range.
- int -> float: where the float holds the integer exactly (up to 2**24 in
  magnitude for float32), as JSON's ``IsLosslessDecimal`` asks.
- float -> int: whole numbers within range; a fraction, NaN or an infinity is refused.
- bool -> bool only: a bool is not taken as a number, nor a number as a bool.
- strings: ``str`` is encoded as UTF-8, ``bytes`` kept; a number is not a
  string, a string is not a number.

An array that already has the input's dtype is returned as it is (no copy).
Nothing here imports TensorFlow.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, Optional, cast

import numpy as np

from serving import status
from serving.codec._dtypes import DType, dtype_from_enum, enum_from_dtype
from serving.codec._signature import TensorSpec

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["cast_to_spec"]

_SHOWN = 64


def cast_to_spec(name: str, value: ArrayLike, spec: Optional[TensorSpec]) -> np.ndarray:
    """``value`` as an array of ``spec``'s dtype; ``status.InvalidArgument`` for a cast that would change it.

    ``spec`` None, or a dtype the codec cannot carry, leaves the value as
    ``np.asarray`` makes it: the server then answers for it.
    """
    if spec is None or not spec.dtype_supported:
        return value if isinstance(value, np.ndarray) else _dense(name, value, None)
    target = dtype_from_enum(cast(int, spec.dtype_enum))   # TensorSpec.__post_init__ sets it; dtype_supported looked it up
    arr = value if isinstance(value, np.ndarray) else _dense(name, value, object if target.is_string else None)
    if arr.dtype.kind in "SU" and not isinstance(value, np.ndarray) and not target.is_string:
        arr = _dense(name, value, object)  # [1, "a"]: name "a", not numpy's "1"
    if target.is_string:
        return _to_strings(name, arr, target)
    if arr.dtype == target.numpy:
        return arr
    if arr.dtype.kind == "O":
        return _objects_to_numbers(name, arr, target)
    return _numbers(name, arr, target, _source_name(arr.dtype))


def _dense(name: str, value: ArrayLike, dtype: Optional[type]) -> np.ndarray:
    try:
        return np.array(value, dtype=dtype)
    except ValueError:
        raise status.InvalidArgument(
            f'input "{name}": the value is not a dense tensor (every list at one level must have '
            "the same length, and scalars sit at one depth)") from None


def _source_name(dtype: np.dtype) -> str:
    try:
        return enum_from_dtype(dtype).name
    except ValueError:
        return str(dtype)


def _refusal(name: str, source: str, target: DType, reason: str) -> status.InvalidArgument:
    return status.InvalidArgument(f'input "{name}": cannot cast {source} to {target.name}: {reason}')


def _shown(value: object) -> str:
    if isinstance(value, np.generic):
        value = value.item()
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def _not(value: object, wanted: str) -> str:
    """The reason a leaf is refused: "'abc' is a string, not a number"."""
    if isinstance(value, (str, bytes, bytearray, np.str_, np.bytes_)):
        kind = "a string"
    elif isinstance(value, (bool, np.bool_)):
        kind = "a bool"
    elif isinstance(value, (int, float, np.number)):
        kind = "a number"
    else:
        return f"{_shown(value)} is not {wanted}"
    return f"{_shown(value)} is {kind}, not {wanted}"


def _leaf_name(value: object) -> str:
    """The dtype a Python leaf stands for: DT_STRING, DT_BOOL, DT_DOUBLE, DT_INT64, or its type ("int" beyond int64)."""
    if isinstance(value, (str, bytes, bytearray)):
        return "DT_STRING"
    if isinstance(value, bool):
        return "DT_BOOL"
    if isinstance(value, float):
        return "DT_DOUBLE"
    if isinstance(value, int) and -2**63 <= value < 2**63:
        return "DT_INT64"
    if isinstance(value, np.generic):
        return _source_name(value.dtype)
    return type(value).__name__


def _leaves(arr: np.ndarray) -> Iterator[Any]:   # Python scalars of arr's kind
    return iter(arr.reshape(-1).tolist())


def _to_strings(name: str, arr: np.ndarray, target: DType) -> np.ndarray:
    out = np.empty(arr.size, dtype=object)
    for i, item in enumerate(_leaves(arr)):
        if isinstance(item, str):
            out[i] = item.encode("utf-8")
        elif isinstance(item, (bytes, bytearray)):
            out[i] = bytes(item)
        else:
            raise _refusal(name, _leaf_source(arr, item), target, _not(item, "a string"))
    return out.reshape(arr.shape)


def _leaf_source(arr: np.ndarray, item: object) -> str:
    """The source dtype's name: the array's, or for an object array the one the offending leaf stands for."""
    return _leaf_name(item) if arr.dtype.kind == "O" else _source_name(arr.dtype)


def _numbers(name: str, arr: np.ndarray, target: DType, source: str) -> np.ndarray:
    kind, want = arr.dtype.kind, target.numpy.kind
    if not arr.size:
        return arr.astype(target.numpy)
    if kind in "SU":
        first = next(_leaves(arr)).decode("utf-8", "replace") if kind == "S" else next(_leaves(arr))
        raise _refusal(name, source, target, f"{_shown(first)} is a string, not {_a(target)}")
    if (kind == "b") != (want == "b"):
        first = next(_leaves(arr))
        raise _refusal(name, source, target, _not(first, _a(target)))
    if kind == "b":
        return arr.astype(target.numpy)
    if kind not in "iuf":
        raise _refusal(name, source, target, f"{_shown(next(_leaves(arr)))} is not a real number")
    check = {"f": _check_float_target, "i": _check_int_target, "u": _check_int_target}[want]
    check(name, arr, target, source)
    return arr.astype(target.numpy)


def _a(target: DType) -> str:
    return "a bool" if target.numpy.kind == "b" else "a number"


def _check_float_target(name: str, arr: np.ndarray, target: DType, source: str) -> None:
    if arr.dtype.kind in "iu":
        limit = 1 << (np.finfo(target.numpy).nmant + 1)
        bad = (arr > limit) | (arr < -limit) if arr.dtype.kind == "i" else arr > limit
        if bad.any():
            raise _refusal(name, source, target, f"{_shown(arr[bad][0])} has no exact {target.name} value "
                                                 f"(integers up to {limit} in magnitude have)")
        return
    if arr.dtype.itemsize <= target.numpy.itemsize:
        return
    biggest = float(np.finfo(target.numpy).max)
    with np.errstate(invalid="ignore"):
        bad = np.isfinite(arr) & (np.abs(arr) > biggest)
    if bad.any():
        raise _refusal(name, source, target, f"{_shown(arr[bad][0])} is out of {target.name}'s range "
                                             f"(largest magnitude {np.finfo(target.numpy).max})")


def _check_int_target(name: str, arr: np.ndarray, target: DType, source: str) -> None:
    info = np.iinfo(target.numpy)
    if arr.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            fraction = ~np.isfinite(arr) | (np.floor(arr) != arr)
        if fraction.any():
            raise _refusal(name, source, target, f"{_shown(arr[fraction][0])} is not a whole number")
        # Exact bounds as floats: -2**63 and 2**63 are powers of two, so representable.
        low, high = float(int(info.min)), float(int(info.max) + 1)
        bad = (arr < low) | (arr >= high)
    else:
        low_ok = arr.dtype.kind == "u" or int(arr.min()) >= int(info.min)
        high_ok = int(arr.max()) <= int(info.max)
        if low_ok and high_ok:
            return
        bad = np.array([not int(info.min) <= int(v) <= int(info.max) for v in _leaves(arr)]).reshape(arr.shape)
    if bad.any():
        raise _refusal(name, source, target, f"{_shown(arr[bad][0])} is out of {target.name}'s range "
                                             f"[{int(info.min)}, {int(info.max)}]")


def _objects_to_numbers(name: str, arr: np.ndarray, target: DType) -> np.ndarray:
    """An object array (Python ints beyond int64, mixed leaves): checked leaf by leaf."""
    leaves = list(_leaves(arr))
    for item in leaves:
        if not isinstance(item, (int, float, np.number, np.bool_)) or isinstance(item, (bool, np.bool_)) != \
                (target.numpy.kind == "b"):
            raise _refusal(name, _leaf_name(item), target, _not(item, _a(target)))
    if target.numpy.kind == "b":
        return np.array(leaves, dtype=np.bool_).reshape(arr.shape)
    if any(isinstance(item, (float, np.floating)) for item in leaves):
        floats = _floats(name, leaves, target)
        return _numbers(name, floats.reshape(arr.shape), target, "DT_DOUBLE")
    return _python_ints(name, leaves, target).reshape(arr.shape)


def _floats(name: str, leaves: list, target: DType) -> np.ndarray:
    out = np.empty(len(leaves), dtype=np.float64)
    for i, item in enumerate(leaves):
        try:
            out[i] = float(item)
        except OverflowError:  # an int beyond any float
            raise _refusal(name, "int", target, f"{_shown(item)} is out of {target.name}'s range") from None
    return out


def _python_ints(name: str, leaves: list, target: DType) -> np.ndarray:
    ints = [int(v) for v in leaves]
    if target.numpy.kind == "f":
        limit = 1 << (np.finfo(target.numpy).nmant + 1)
        bad = next((v for v in ints if abs(v) > limit), None)
        if bad is not None:
            raise _refusal(name, "int", target, f"{_shown(bad)} has no exact {target.name} value "
                                                f"(integers up to {limit} in magnitude have)")
    else:
        info = np.iinfo(target.numpy)
        bad = next((v for v in ints if not int(info.min) <= v <= int(info.max)), None)
        if bad is not None:
            raise _refusal(name, "int", target, f"{_shown(bad)} is out of {target.name}'s range "
                                                f"[{int(info.min)}, {int(info.max)}]")
    return np.array(ints, dtype=target.numpy)
