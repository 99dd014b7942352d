"""One tensor <-> its JSON value (nested lists), typed by the signature's dtype.

Parsing follows TF Serving's ``util/json_tensor.cc``: the JSON value must be
dense (every list at one level has one size, every scalar at the same depth),
scalars must be of the tensor's type (no ``1.5`` in an int tensor, no ``true``
in a float one, an int within ``IsInt``'s int32 range for int32/int16/int8/uint8,
then wrapped as a TensorProto's ``int_val`` is; any number for a float tensor,
cast as rapidjson's ``GetFloat`` casts it: +-inf beyond its range), and strings are either JSON strings or
``{"b64": "<base64>"}`` objects. Errors are ``status.InvalidArgument`` with
TF Serving's wording.

The common path is vectorised (``np.array`` on the nested lists); the exact
offending value is only searched for once a check has failed. Known leniency:
a ``true``/``false`` mixed into a list of numbers is taken as 1/0.

A value may also be a ``DenseArray`` (``_json_dense``: numbers parsed straight
to numpy, no lists). Numeric tensors take it as it is; any other tensor, and
any check that fails, go through its parsed lists, so results and messages
are those of the list path.
"""
from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Callable, Iterator, Optional, TypeGuard, Union, overload

import numpy as np

from serving import status
from serving.codec._dtypes import DT_STRING, DType, enum_from_dtype
from serving.codec._json import JSON, json_type_name, json_value_string
from serving.codec._json_dense import DenseArray, DenseJSON
from serving.codec._limits import ElementBudget

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike

__all__ = [
    "json_to_array",
    "array_to_json",
    "dense_shape",
    "stack_dense",
    "is_b64_object",
    "decode_b64_object",
    "status_string",
    "JSON_DTYPE_NAMES",
    "JSONWithArrays",
]

JSON_DTYPE_NAMES = frozenset({"DT_FLOAT", "DT_DOUBLE", "DT_INT32", "DT_INT16", "DT_INT8", "DT_UINT8", "DT_STRING",
                              "DT_INT64", "DT_BOOL", "DT_UINT32", "DT_UINT64"})
"""The dtypes JSON values convert to and from: the cases of ``json_tensor.cc``'s ``AddValueToTensor`` (request
values) and ``AddSingleValueAndAdvance`` (response values), the same eleven. DT_HALF and DT_UINT16 are neither:
a request value for one is ``UNIMPLEMENTED: Conversion of JSON Value: 1.5 to type: half``, a response value
``Failed to write JSON value for tensor type: half``."""

_MAX_DIMS = 32  # numpy's limit

JSONWithArrays = Union[JSON, np.ndarray, list["JSONWithArrays"], dict[str, "JSONWithArrays"]]
"""A JSON value whose positions may hold numpy arrays: what ``array_to_json`` returns, for ``json_dumps``."""


def status_string(error: status.ServingError) -> str:
    """``Status::ToString()`` of an error, as TF Serving nests it in messages."""
    return f"{error.code.name}: {error.details}"


def is_b64_object(value: object) -> TypeGuard[dict[str, str]]:
    """True for ``{"b64": "<string>"}`` (exactly one key, a string value)."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def decode_b64_object(value: JSON) -> bytes:
    """The bytes of a ``{"b64": ...}`` object; InvalidArgument otherwise."""
    if not is_b64_object(value):
        raise status.InvalidArgument(
            f"JSON Value: {json_value_string(value)} not formatted correctly for base64 data")
    try:
        return base64.b64decode(value["b64"], validate=True)
    except (binascii.Error, ValueError):
        raise status.InvalidArgument("Unable to base64 decode") from None


def dense_shape(value: DenseJSON) -> list[int]:
    """The shape read along first elements (``GetDenseTensorShape``)."""
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    if isinstance(value, DenseArray):
        shape.extend(value.shape)
    return shape


def stack_dense(values: list) -> Optional[DenseArray]:
    """One ``DenseArray`` of ``values`` stacked, if all are ``DenseArray`` of one shape; else None."""
    if not values or not all(isinstance(v, DenseArray) for v in values):
        return None
    shape = values[0].shape
    if any(v.shape != shape for v in values):
        return None
    return DenseArray(b"[" + b",".join(v.text for v in values) + b"]", np.stack([v.array for v in values]))


def json_to_array(value: DenseJSON, dtype: DTypeLike, *, budget: Optional[ElementBudget] = None) -> np.ndarray:
    """The tensor a parsed JSON value holds, with the signature's ``dtype``.

    Strings come back as an object array of ``bytes``. A ``budget`` is charged
    from the value's shape before the array is built (``status.InvalidArgument``
    past it).
    """
    row = enum_from_dtype(dtype)
    if budget is not None:
        budget.take(dense_shape(value))
    if row.name not in JSON_DTYPE_NAMES:
        return _unconvertible(value, row)
    if isinstance(value, DenseArray):
        array = _numbers(value.array, row)
        if array is not None:
            return array
        value = value.value()
    if row.enum == DT_STRING:
        return _strings(value)
    try:
        arr = np.array(value)
    except ValueError:
        raise _shape_error(value) from None
    if arr.ndim > 0 and arr.dtype.kind == "O" and _has_list_leaf(arr):
        raise _shape_error(value)
    if arr.size == 0:
        return arr.astype(row.numpy)
    _check_kind(value, arr, row)
    if row.numpy.kind in "iu" and arr.dtype.kind not in "iu":
        # Valid ints numpy could not hold in one int type (uint64 beyond int64).
        return np.array(value, dtype=row.numpy)
    return _as_dtype(arr, row)


def _numbers(arr: np.ndarray, row: DType) -> Optional[np.ndarray]:
    """``arr`` (int64 or float64 from ``DenseArray``) as a numeric tensor; None if any check fails."""
    if row.enum == DT_STRING or row.numpy.kind == "b":
        return None
    try:
        _check_kind(None, arr, row)  # the value only names an offending leaf; a failure is redone on lists
    except status.InvalidArgument:
        return None
    return _as_dtype(arr, row)


def _check_kind(value: DenseJSON, arr: np.ndarray, row: DType) -> None:
    target = row.numpy.kind
    kind = arr.dtype.kind
    if target == "f":
        # AddValueToTensor: any JSON number (IsNumber), cast as rapidjson's GetFloat/GetDouble cast it.
        if kind in "iuf":
            return
        bad = _first_leaf(value, lambda v: not _is_number(v), _NONE)
        if bad is not _NONE:
            raise _type_error(bad, row)
        return
    if target == "b":
        if kind != "b":
            raise _type_error(_first_leaf(value, lambda v: not isinstance(v, bool)), row)
        return
    if kind not in "iu" or not _ints_in_range(arr, row):
        # kind "O" can still be all valid ints (uint64 values above int64's range).
        bad = _first_leaf(value, lambda v: not _is_int_of(v, row), _NONE)
        if bad is not _NONE:
            raise _type_error(bad, row)


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _json_range(row: DType) -> np.iinfo:
    """The JSON integers ``AddValueToTensor`` takes for an int dtype: ``IsInt`` (int32's range) for int32, int16,
    int8 and uint8, whose values are then cast (wrapped) to the dtype as a TensorProto's ``int_val`` is."""
    if row.numpy.itemsize < 4 or row.numpy == np.int32:
        return np.iinfo(np.int32)
    return np.iinfo(row.numpy)


def _is_int_of(v: object, row: DType) -> bool:
    if not isinstance(v, int) or isinstance(v, bool):
        return False
    info = _json_range(row)
    return int(info.min) <= v <= int(info.max)


def _ints_in_range(arr: np.ndarray, row: DType) -> bool:
    info = _json_range(row)
    return int(arr.min()) >= int(info.min) and int(arr.max()) <= int(info.max)


def _as_dtype(arr: np.ndarray, row: DType) -> np.ndarray:
    """``arr`` cast to the tensor's dtype as TF Serving casts a JSON number: a number reaches a float tensor
    through a double (``GetFloat`` is ``static_cast<float>(GetDouble())``: beyond float's range +-inf,
    below it +-0), a narrow int wraps."""
    if row.numpy.kind == "f" and arr.dtype.kind != "f":
        arr = arr.astype(np.float64)
    with np.errstate(over="ignore", under="ignore"):
        return arr.astype(row.numpy)


def _type_error(value: object, row: DType) -> status.InvalidArgument:
    return status.InvalidArgument(
        f"JSON Value: {json_value_string(value)} Type: {json_type_name(value)} "
        f"is not of expected type: {row.tf_name}")


def _strings(value: DenseJSON) -> np.ndarray:
    arr = np.array(value, dtype=object)
    if _has_list_leaf(arr):
        raise _shape_error(value)
    flat = arr.reshape(-1)
    out = np.empty(flat.size, dtype=object)
    for i, item in enumerate(flat.tolist()):
        out[i] = _string_leaf(item)
    return out.reshape(arr.shape)


def _string_leaf(item: object) -> bytes:
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, bytes):  # never parsed from JSON; callers building tensors in Python pass bytes
        return item
    if isinstance(item, dict):
        return decode_b64_object(item)
    raise _type_error(item, enum_from_dtype(object))


def _has_list_leaf(arr: np.ndarray) -> bool:
    return any(isinstance(v, list) for v in arr.reshape(-1).tolist())


def _leaves(value: DenseJSON) -> Iterator[DenseJSON]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        else:
            yield item


_NONE = object()


def _first_leaf(value: DenseJSON, bad: Callable[[DenseJSON], bool], default: object = None) -> object:
    """The first leaf that is ``bad``; ``default`` (or the whole value) if none is."""
    return next((v for v in _leaves(value) if bad(v)), value if default is None else default)


def _shape_error(value: DenseJSON) -> status.ServingError:
    """TF Serving's message for the first place ``value`` is not dense."""
    shape = dense_shape(value)
    if len(shape) > _MAX_DIMS:
        return _too_deep(shape)
    error = _first_problem(value, shape)
    return error or status.InvalidArgument("JSON Value is not a dense tensor")


def _too_deep(shape: list[int]) -> status.ServingError:
    return status.InvalidArgument(
        f"JSON Value nests lists {len(shape)} deep; a tensor has at most {_MAX_DIMS} dimensions")


def _unconvertible(value: DenseJSON, row: DType) -> np.ndarray:
    """A value for a dtype ``AddValueToTensor`` has no case for (DT_HALF, DT_UINT16): ``FillTensorProto``'s first
    error in its order (a list's level and size before its elements): a misplaced leaf or list, an object
    (``TypeError``), else the first value's ``UNIMPLEMENTED: Conversion of JSON Value: 1.5 to type: half``.
    A value with no leaf at all (``[]``, ``[[], []]``) is an empty tensor, as in TF Serving."""
    shape = dense_shape(value)
    if len(shape) > _MAX_DIMS:
        raise _too_deep(shape)

    def conversion(leaf: object) -> status.ServingError:
        if isinstance(leaf, dict):
            return _type_error(leaf, row)
        return status.Unimplemented(f"Conversion of JSON Value: {json_value_string(leaf)} to type: {row.tf_name}")

    error = _first_problem(value.value() if isinstance(value, DenseArray) else value, shape, conversion)
    if error is not None:
        raise error
    return np.zeros(shape, row.numpy)


def _first_problem(value: object, shape: list[int],
                   leaf_error: Callable[[object], status.ServingError] | None = None) -> status.ServingError | None:
    """``FillTensorProto``'s first error for ``value`` read as ``shape``: a leaf at the wrong level, a list
    too deep or of the wrong size, or ``leaf_error`` of the first leaf where it belongs."""
    rank = len(shape)
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if not isinstance(item, list):
            if level != rank:
                return status.InvalidArgument(
                    f"JSON Value: {json_value_string(item)} found at incorrect level: "
                    f"{level + 1} in the JSON DOM. Expected at level: {rank}")
            if leaf_error is not None:
                return leaf_error(item)
            continue
        if level >= rank:
            return status.InvalidArgument(f"Encountered list at unexpected level: {level} expected < {rank}")
        if len(item) != shape[level]:
            return status.InvalidArgument(
                f"Encountered list at unexpected size: {len(item)} at level: {level} "
                f"expected size: {shape[level]}")
        stack.extend((v, level + 1) for v in reversed(item))
    return None


def array_to_json(array: ArrayLike, *, as_b64: bool = False) -> JSONWithArrays:
    """The JSON value of a tensor, for ``json_dumps``.

    Numeric arrays are returned as they are (``json_dumps`` writes them fast,
    non-finite values included). String tensors become nested lists of text;
    with ``as_b64`` (outputs named ``*_bytes``) or for ``bytes`` that are not
    UTF-8, elements become ``{"b64": ...}``. Python lists keep their values
    (only ``bytes`` and arrays inside them are converted).
    """
    if isinstance(array, (list, tuple)):
        return [array_to_json(item, as_b64=as_b64) for item in array]
    if isinstance(array, (bytes, bytearray, str)):
        return _string_json(array if isinstance(array, str) else bytes(array), as_b64)
    if isinstance(array, (int, float, bool, dict)) or array is None:
        return array
    arr = np.asarray(array)
    if arr.dtype.kind not in "OSU":
        return arr
    flat = [_string_json(v, as_b64) for v in arr.reshape(-1).tolist()]
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(arr.shape).tolist()


@overload
def _string_json(value: str | bytes | bytearray, as_b64: bool) -> JSON: ...
@overload
def _string_json(value: object, as_b64: bool) -> object: ...
def _string_json(value: object, as_b64: bool) -> object:   # an object array's other values: as they are
    if isinstance(value, str) and not as_b64:
        return value
    if not isinstance(value, (str, bytes, bytearray)):
        return value
    data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if not as_b64:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return {"b64": base64.b64encode(data).decode("ascii")}
