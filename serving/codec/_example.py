"""Plain dicts <-> tf.train.Example (duck-typed: official or wire messages).

The rules are TF Serving's for JSON examples (``json_tensor.cc``
``AddValueToFeature``): a float goes to ``float_list``, an int or a bool to
``int64_list``, a str, bytes or ``{"b64": ...}`` to ``bytes_list``; one
feature holds one kind; a value is a scalar or a flat list. numpy arrays are
taken by dtype.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
from numpy.typing import ArrayLike

from serving import status
from serving.codec._json import JSON, json_type_name
from serving.codec._json_tensor import decode_b64_object, is_b64_object

if TYPE_CHECKING:
    # The wire messages stand for both schemas: tf.train.Example's official ones have the same fields.
    from serving.wire.serving_apis_pb2 import Example, Feature

__all__ = ["Features", "example_from_dict", "example_to_dict"]

Features = Mapping[str, ArrayLike]
"""One tf.Example as a dict: feature name to its value or values (bytes or text, ints, floats)."""

_INT64_MAX = (1 << 63) - 1
_INT64_MIN = -(1 << 63)
_KIND_NAME = {"bytes_list": "bytes", "float_list": "float", "int64_list": "int64"}


def example_from_dict(features: Features | JSON, example_proto: Example) -> Example:
    """Fill ``example_proto`` (a tf.train.Example-shaped message) from ``features``; return it.

    ``features`` may be a parsed JSON value (a REST body's example): anything but an object is refused.

    Raises ``status.InvalidArgument`` with TF Serving's wording for values of
    the wrong kind (null, nested lists, mixed kinds, uint64, lossy floats).
    """
    if not isinstance(features, Mapping):
        raise status.InvalidArgument(
            f"Example must be JSON object but got JSON {json_type_name(features)}")
    feature_map = example_proto.features.feature
    for name, value in features.items():
        feature = feature_map[name]
        feature.Clear()
        if isinstance(value, (np.ndarray, np.generic)):
            _fill_from_array(name, np.asarray(value), feature)
        elif isinstance(value, (list, tuple)):
            for item in value:
                _add_value(name, item, feature)
        else:
            _add_value(name, value, feature)
    return example_proto


def _fill_from_array(name: str, arr: np.ndarray, feature: Feature) -> None:
    flat = arr.reshape(-1)
    kind = arr.dtype.kind
    if kind == "f":
        feature.float_list.value.extend(flat.astype(np.float32).tolist())
    elif kind in "iub":
        if kind == "u" and flat.size and int(flat.max()) > _INT64_MAX:
            raise status.InvalidArgument(f"Feature: {name} has uint64_t element. Only int64_t is supported.")
        feature.int64_list.value.extend(flat.astype(np.int64).tolist())
    elif kind in "OSU":
        for item in flat.tolist():
            _add_value(name, item, feature)
    else:
        raise status.InvalidArgument(f"Feature: {name} has unsupported dtype {arr.dtype}")


def _kind_of(value: object, name: str) -> str:
    if value is None or isinstance(value, (list, tuple)) or (isinstance(value, dict) and not is_b64_object(value)):
        raise status.InvalidArgument(
            f"Feature: {name} has element with unexpected JSON type: {json_type_name(value)}")
    if isinstance(value, (bool, np.bool_)) or isinstance(value, (int, np.integer)):
        return "int64_list"
    if isinstance(value, (float, np.floating)):
        return "float_list"
    if isinstance(value, (str, bytes, dict)):
        return "bytes_list"
    raise status.InvalidArgument(
        f"Feature: {name} has element with unexpected type: {type(value).__name__}")


def _add_value(name: str, value: Any, feature: Feature) -> None:   # of the kind _kind_of names
    kind = _kind_of(value, name)
    current = feature.WhichOneof("kind")
    if current is not None and current != kind:
        raise status.InvalidArgument(
            f"Unexpected element type in feature: {name} expecting type: {_KIND_NAME[current]}")
    if kind == "int64_list":
        number = int(value)
        if number > _INT64_MAX or number < _INT64_MIN:
            raise status.InvalidArgument(f"Feature: {name} has uint64_t element. Only int64_t is supported.")
        feature.int64_list.value.append(number)
    elif kind == "float_list":
        feature.float_list.value.append(float(value))  # GetFloat's cast: beyond float's range +-inf
    elif isinstance(value, dict):
        feature.bytes_list.value.append(decode_b64_object(value))
    else:
        feature.bytes_list.value.append(value.encode("utf-8") if isinstance(value, str) else bytes(value))


def example_to_dict(example_proto: Example) -> dict[str, list]:
    """``{feature name: list of values}``: bytes, float or int per the feature's kind."""
    out: dict[str, list] = {}
    for name, feature in example_proto.features.feature.items():
        kind = feature.WhichOneof("kind")
        out[name] = list(getattr(feature, kind).value) if kind else []
    return out
