"""How many tensor elements one request may make the server allocate, counted from shapes alone.

A TensorProto's shape, not its bytes, decides what decoding allocates: one
``float_val`` with shape ``[1000000, 8, 8, 1]`` is a 50-byte message that
TensorFlow's broadcast rule turns into 64 million floats. ``ElementBudget``
counts each tensor's elements from its shape BEFORE anything is allocated and
refuses the request once its tensors together pass the limit.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

from serving import status

__all__ = ["ElementBudget", "element_count"]


def element_count(shape: Sequence[int]) -> int:
    """The number of elements of ``shape`` (exact: Python integers never overflow)."""
    return math.prod(int(d) for d in shape)


def _shape_text(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


class ElementBudget:
    """The elements the tensors of one request may still hold; ``limit`` None means no limit.

    ``take(shape)`` charges a tensor's elements and raises ``status.InvalidArgument``,
    naming the rule and the limit, once the request's total passes ``limit``.
    One budget per request; not thread-safe.
    """

    def __init__(self, limit: Optional[int]) -> None:
        self.limit = limit
        self.used = 0

    def take(self, shape: Sequence[int]) -> None:
        """Charge a tensor of ``shape``; InvalidArgument if the request would pass the limit."""
        count = element_count(shape)
        self.used += count
        if self.limit is not None and self.used > self.limit:
            raise status.InvalidArgument(
                f"Request tensors hold at least {self.used} elements (one of shape {_shape_text(shape)} "
                f"holds {count}), more than the limit of {self.limit} elements per request "
                "(embedded server flag --max_tensor_elements)")
