"""Every numpy <-> TensorProto <-> JSON conversion of the stack, in symmetric pairs.

The TensorProto functions are duck-typed: they read and fill any message with
TensorProto's field names, so the same code serves the official
``tensorflow.core.framework.tensor_pb2.TensorProto`` (server, exporter) and the
project's own wire schema (client SDK, which must not import TensorFlow).

One dtype table (``DTYPES``) maps numpy dtypes to TF ``DataType`` numbers and
to the typed ``*_val`` field that carries them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

__all__ = [
    "DType",
    "DTYPES",
    "dtype_from_enum",
    "enum_from_dtype",
    "ndarray_to_tensor_proto",
    "tensor_proto_to_ndarray",
]


@dataclass(frozen=True)
class DType:
    """One row of the dtype table."""

    name: str          # TF name, e.g. "DT_FLOAT"
    enum: int          # tensorflow.DataType number
    numpy: np.dtype    # numpy dtype (object for strings)
    val_field: str     # the typed repeated field of TensorProto


DTYPES: tuple[DType, ...] = (
    DType("DT_FLOAT", 1, np.dtype(np.float32), "float_val"),
    DType("DT_DOUBLE", 2, np.dtype(np.float64), "double_val"),
    DType("DT_INT32", 3, np.dtype(np.int32), "int_val"),
    DType("DT_UINT8", 4, np.dtype(np.uint8), "int_val"),
    DType("DT_INT16", 5, np.dtype(np.int16), "int_val"),
    DType("DT_INT8", 6, np.dtype(np.int8), "int_val"),
    DType("DT_STRING", 7, np.dtype(object), "string_val"),
    DType("DT_INT64", 9, np.dtype(np.int64), "int64_val"),
    DType("DT_BOOL", 10, np.dtype(np.bool_), "bool_val"),
    DType("DT_UINT16", 17, np.dtype(np.uint16), "int_val"),
    DType("DT_HALF", 19, np.dtype(np.float16), "half_val"),
    DType("DT_UINT32", 22, np.dtype(np.uint32), "uint32_val"),
    DType("DT_UINT64", 23, np.dtype(np.uint64), "uint64_val"),
)
_BY_ENUM = {d.enum: d for d in DTYPES}
_BY_NUMPY = {d.numpy: d for d in DTYPES}


def dtype_from_enum(enum: int) -> DType:
    """The table row of a TF ``DataType`` number; ValueError if unsupported."""
    try:
        return _BY_ENUM[int(enum)]
    except KeyError:
        raise ValueError(f"unsupported tensor dtype: DataType {enum}") from None


def enum_from_dtype(dtype: Any) -> DType:
    """The table row of a numpy dtype; strings and bytes map to DT_STRING."""
    dt = np.dtype(dtype)
    if dt.kind in ("S", "U", "O"):
        return _BY_ENUM[7]
    try:
        return _BY_NUMPY[dt.newbyteorder("=") if dt.byteorder not in "=|" else dt]
    except KeyError:
        raise ValueError(f"unsupported numpy dtype for a TensorProto: {dt}") from None


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, np.bytes_):
        return bytes(value)
    raise ValueError(f"DT_STRING tensors hold bytes or str, got {type(value).__name__}")


def ndarray_to_tensor_proto(array: Any, proto: Any, *, use_tensor_content: bool = True) -> Any:
    """Fill ``proto`` (any TensorProto-shaped message) from ``array``; return it.

    Numeric tensors go into ``tensor_content`` (little-endian raw bytes) by
    default, or into their typed ``*_val`` field when ``use_tensor_content``
    is False. Strings always use ``string_val``.
    """
    arr = np.asarray(array)
    row = enum_from_dtype(arr.dtype)
    proto.Clear()
    proto.dtype = row.enum
    dims = proto.tensor_shape.dim
    for size in arr.shape:
        dims.add().size = size
    if row.enum == 7:
        proto.string_val.extend(_as_bytes(v) for v in arr.reshape(-1))
        return proto
    arr = arr.astype(row.numpy.newbyteorder("<"), copy=False)
    if use_tensor_content:
        proto.tensor_content = np.ascontiguousarray(arr).tobytes()
    elif row.enum == 19:
        proto.half_val.extend(arr.reshape(-1).view(np.uint16).astype(np.int32).tolist())
    else:
        getattr(proto, row.val_field).extend(arr.reshape(-1).tolist())
    return proto


def tensor_proto_to_ndarray(proto: Any) -> np.ndarray:
    """The numpy array a TensorProto-shaped message holds.

    Typed ``*_val`` fields shorter than the shape are padded with their last
    value (TensorFlow's rule: one value fills the whole tensor); empty ones
    give zeros. Strings come back as an object array of ``bytes``.
    """
    row = dtype_from_enum(proto.dtype)
    shape = tuple(int(d.size) for d in proto.tensor_shape.dim)
    if any(s < 0 for s in shape):
        raise ValueError(f"tensor shape has a negative dimension: {list(shape)}")
    count = int(np.prod(shape, dtype=np.int64))
    if row.enum != 7 and proto.tensor_content:
        data = np.frombuffer(proto.tensor_content, dtype=row.numpy.newbyteorder("<"))
        if data.size != count:
            raise ValueError(
                f"tensor_content holds {data.size} values but shape {list(shape)} needs {count}")
        return data.astype(row.numpy, copy=False).reshape(shape)
    values = getattr(proto, row.val_field)
    if row.enum == 7:
        flat = np.empty(len(values), dtype=object)
        flat[:] = list(values)
    elif row.enum == 19:
        flat = np.asarray(values, dtype=np.int32).astype(np.uint16).view(np.float16)
    else:
        flat = np.asarray(values, dtype=row.numpy)
    return _fill(flat, count, row).reshape(shape)


def _fill(flat: np.ndarray, count: int, row: DType) -> np.ndarray:
    if flat.size == count:
        return flat
    if flat.size > count:
        raise ValueError(f"{row.val_field} holds {flat.size} values but the shape needs {count}")
    if flat.size == 0:
        fill: Optional[Any] = b"" if row.enum == 7 else 0
        return np.full(count, fill, dtype=row.numpy)
    return np.concatenate([flat, np.full(count - flat.size, flat[-1], dtype=row.numpy)])
