"""numpy <-> TensorProto, duck-typed over official and wire TensorProto messages."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np

from serving.codec._dtypes import DT_HALF, DT_STRING, DType, dtype_from_enum, enum_from_dtype
from serving.codec._limits import ElementBudget, element_count

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    # The wire message stands for both schemas: TensorFlow's official TensorProto has the same fields.
    from serving.wire.serving_apis_pb2 import TensorProto

__all__ = ["ndarray_to_tensor_proto", "tensor_proto_to_ndarray", "tensor_proto_shape", "as_bytes"]


def as_bytes(value: object) -> bytes:
    """A DT_STRING element as bytes (str is UTF-8 encoded)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise ValueError(f"DT_STRING tensors hold bytes or str, got {type(value).__name__}")


def ndarray_to_tensor_proto(array: ArrayLike, proto: TensorProto, *, use_tensor_content: bool = True) -> TensorProto:
    """Fill ``proto`` (any TensorProto-shaped message) from ``array``; return it.

    Numeric tensors go into ``tensor_content`` (little-endian raw bytes) by
    default, or into their typed ``*_val`` field when ``use_tensor_content``
    is False (``half_val`` holds float16 bit patterns). Strings always use
    ``string_val``. ``tensor_shape`` is always set, also for scalars (as
    ``tf.make_tensor_proto`` does).
    """
    arr = np.asarray(array)
    row = enum_from_dtype(arr.dtype)
    proto.Clear()
    proto.dtype = row.enum
    proto.tensor_shape.SetInParent()
    dims = proto.tensor_shape.dim
    for size in arr.shape:
        dims.add().size = size
    if row.enum == DT_STRING:
        proto.string_val.extend(as_bytes(v) for v in arr.reshape(-1).tolist())
        return proto
    arr = arr.astype(row.numpy.newbyteorder("<"), copy=False)
    if use_tensor_content:
        if arr.size:
            proto.tensor_content = np.ascontiguousarray(arr).tobytes()
    elif row.enum == DT_HALF:
        proto.half_val.extend(arr.reshape(-1).view(np.uint16).tolist())
    else:
        getattr(proto, row.val_field).extend(arr.reshape(-1).tolist())
    return proto


def tensor_proto_shape(proto: TensorProto) -> tuple[int, ...]:
    """A TensorProto-shaped message's shape, read without touching its values; ValueError if a dim is negative."""
    shape = tuple(int(d.size) for d in proto.tensor_shape.dim)
    if any(s < 0 for s in shape):
        raise ValueError(f"tensor shape has a negative dimension: {list(shape)}")
    return shape


def tensor_proto_to_ndarray(proto: TensorProto, *, budget: Optional[ElementBudget] = None) -> np.ndarray:
    """The numpy array a TensorProto-shaped message holds.

    Typed ``*_val`` fields shorter than the shape are padded with their last
    value (TensorFlow's rule: one value fills the whole tensor); empty ones
    give zeros. Strings come back as an object array of ``bytes``. Arrays read
    from ``tensor_content`` share its buffer and are read-only; a tensor filled
    from one value (or none) is a read-only broadcast view that allocates
    nothing until something copies it. A ``budget``
    is charged from the shape before anything is allocated (the server's
    ``--max_tensor_elements``); past it, ``status.InvalidArgument``.
    """
    row = dtype_from_enum(proto.dtype)
    shape = tensor_proto_shape(proto)
    if budget is not None:
        budget.take(shape)
    count = element_count(shape)
    if row.enum != DT_STRING and proto.tensor_content:
        data = np.frombuffer(proto.tensor_content, dtype=row.numpy.newbyteorder("<"))
        if data.size != count:
            raise ValueError(
                f"tensor_content holds {data.size} values but shape {list(shape)} needs {count}")
        return data.astype(row.numpy, copy=False).reshape(shape)
    values = getattr(proto, row.val_field)
    if row.enum == DT_STRING:
        flat = np.empty(len(values), dtype=object)
        flat[:] = list(values)
    elif row.enum == DT_HALF:
        flat = np.asarray(values, dtype=np.int32).astype(np.uint16).view(np.float16)
    else:
        flat = np.asarray(values, dtype=row.numpy)
    return _fill(flat, shape, count, row)


def _fill(flat: np.ndarray, shape: tuple[int, ...], count: int, row: DType) -> np.ndarray:
    if flat.size == count:
        return flat.reshape(shape)
    if flat.size > count:
        raise ValueError(f"{row.val_field} holds {flat.size} values but the shape needs {count}")
    if flat.size <= 1:   # one value (or none: zeros) fills the tensor: a view, nothing allocated
        fill: object = flat[0] if flat.size else (b"" if row.enum == DT_STRING else 0)
        scalar = np.empty((), dtype=row.numpy)
        scalar[()] = fill
        return np.broadcast_to(scalar, shape)
    out = np.empty(count, dtype=row.numpy)   # one allocation: the values, then the last one repeated
    out[:flat.size] = flat
    out[flat.size:] = flat[-1]
    return out.reshape(shape)
