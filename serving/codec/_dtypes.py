"""The one dtype table: numpy dtype <-> TF ``DataType`` <-> TensorProto ``*_val`` field."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

__all__ = ["DType", "DTYPES", "DT_STRING", "DT_HALF", "dtype_from_enum", "dtype_from_name", "enum_from_dtype"]

DT_STRING = 7
DT_HALF = 19


@dataclass(frozen=True)
class DType:
    """One row of the dtype table."""

    name: str          # TF name, e.g. "DT_FLOAT"
    enum: int          # tensorflow.DataType number
    numpy: np.dtype    # numpy dtype (object for strings)
    val_field: str     # the typed repeated field of TensorProto

    @property
    def tf_name(self) -> str:
        """TensorFlow's ``DataTypeString``: "float", "int32", "string", ..."""
        return self.name[3:].lower()

    @property
    def is_string(self) -> bool:
        return self.enum == DT_STRING


DTYPES: tuple[DType, ...] = (
    DType("DT_FLOAT", 1, np.dtype(np.float32), "float_val"),
    DType("DT_DOUBLE", 2, np.dtype(np.float64), "double_val"),
    DType("DT_INT32", 3, np.dtype(np.int32), "int_val"),
    DType("DT_UINT8", 4, np.dtype(np.uint8), "int_val"),
    DType("DT_INT16", 5, np.dtype(np.int16), "int_val"),
    DType("DT_INT8", 6, np.dtype(np.int8), "int_val"),
    DType("DT_STRING", DT_STRING, np.dtype(object), "string_val"),
    DType("DT_INT64", 9, np.dtype(np.int64), "int64_val"),
    DType("DT_BOOL", 10, np.dtype(np.bool_), "bool_val"),
    DType("DT_UINT16", 17, np.dtype(np.uint16), "int_val"),
    DType("DT_HALF", DT_HALF, np.dtype(np.float16), "half_val"),
    DType("DT_UINT32", 22, np.dtype(np.uint32), "uint32_val"),
    DType("DT_UINT64", 23, np.dtype(np.uint64), "uint64_val"),
)
_BY_ENUM = {d.enum: d for d in DTYPES}
_BY_NUMPY = {d.numpy: d for d in DTYPES}
_BY_NAME = {d.name: d for d in DTYPES}


def dtype_from_enum(enum: int) -> DType:
    """The table row of a TF ``DataType`` number; ValueError if unsupported."""
    try:
        return _BY_ENUM[int(enum)]
    except KeyError:
        raise ValueError(f"unsupported tensor dtype: DataType {enum}") from None


def dtype_from_name(name: str) -> DType:
    """The table row of a TF ``DataType`` name (``"DT_FLOAT"``); ValueError if unsupported."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unsupported tensor dtype: {name}") from None


def enum_from_dtype(dtype: DTypeLike) -> DType:
    """The table row of a numpy dtype; strings and bytes map to DT_STRING."""
    dt = np.dtype(dtype)
    if dt.kind in ("S", "U", "O"):
        return _BY_ENUM[DT_STRING]
    try:
        return _BY_NUMPY[dt.newbyteorder("=") if dt.byteorder not in "=|" else dt]
    except KeyError:
        raise ValueError(f"unsupported numpy dtype for a TensorProto: {dt}") from None
