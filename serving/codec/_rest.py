"""Predict over REST: request and response bodies, both sides (TF Serving's JSON).

Server side: ``rest_request_loads`` (the body parsed, large numeric tensors
straight to numpy), ``rest_request_to_inputs`` (row ``instances`` or columnar
``inputs``) and ``outputs_to_rest_response`` (``predictions``/``outputs``).
Client side: ``inputs_to_rest_request`` and ``rest_response_to_outputs``.
Wording of errors follows ``util/json_tensor.cc``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping, Optional, TypeGuard

import numpy as np
import orjson

from serving import status
from serving.codec._dtypes import DTYPES, enum_from_dtype
from serving.codec._decimal import decimal_row_texts, decimal_text
from serving.codec._json import JSON, json_dumps, json_loads, json_value_string
from serving.codec._json_dense import DenseArray, DenseJSON, json_loads_dense
from serving.codec._json_tensor import (
    JSON_DTYPE_NAMES,
    JSONWithArrays,
    array_to_json,
    decode_b64_object,
    dense_shape,
    is_b64_object,
    json_to_array,
    stack_dense,
    status_string,
)
from serving.codec._limits import ElementBudget

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike

__all__ = [
    "rest_request_loads",
    "rest_request_to_inputs",
    "outputs_to_rest_response",
    "inputs_to_rest_request",
    "rest_response_to_outputs",
    "BYTES_SUFFIX",
]

BYTES_SUFFIX = "_bytes"
_INSTANCES, _INPUTS = "instances", "inputs"


def _format_error(doc: object, text: str) -> status.InvalidArgument:
    return status.InvalidArgument(f"JSON Value: {json_value_string(doc)} {text}")


def rest_request_loads(body: bytes | bytearray | memoryview) -> DenseJSON:
    """A Predict request body parsed for ``rest_request_to_inputs``; errors are ``json_loads``'s.

    Large dense arrays of numbers where tensors go (the ``instances`` or
    ``inputs`` value, a value of an ``inputs`` object or of an object in
    ``instances``) come back as ``DenseArray``: parsed straight to numpy, no
    nested lists. Everything else is what ``json_loads`` returns.
    """
    return json_loads_dense(body, _is_tensor_position)


def _is_tensor_position(path: tuple) -> bool:
    if not path or path[0] not in (_INSTANCES, _INPUTS):
        return False
    if len(path) == 1:
        return True
    if path[0] == _INPUTS:
        return len(path) == 2 and isinstance(path[1], str)
    return len(path) == 3 and isinstance(path[1], int) and isinstance(path[2], str)


def rest_request_to_inputs(
        request: DenseJSON,
        input_specs: Mapping[str, DTypeLike], *,
        max_elements: Optional[int] = None) -> tuple[dict[str, np.ndarray], bool]:
    """The input tensors of a parsed Predict request body, typed by ``input_specs``.

    ``input_specs`` maps each input name of the signature to its numpy dtype.
    Returns ``(inputs, row_format)``: ``row_format`` is True for ``instances``
    (answer with ``predictions``) and False for ``inputs`` (answer with
    ``outputs``). Raises ``status.InvalidArgument`` naming the broken rule.
    Unlike TF Serving, names in an ``inputs`` object that the signature lacks
    are rejected instead of ignored. ``max_elements`` bounds the elements of
    all inputs together, counted before any array is built.
    """
    budget = ElementBudget(max_elements)
    if not isinstance(request, dict):
        raise _format_error(request, "Is not object")
    signature = request.get("signature_name")
    if signature is not None and not isinstance(signature, str):
        raise _format_error(request, "not formatted correctly. 'signature_name' key must be a string value.")
    if not input_specs:
        raise status.InvalidArgument(f"Failed to get input map for signature: {signature or 'DEFAULT'}")
    has_instances, has_inputs = _INSTANCES in request, _INPUTS in request
    if has_instances and has_inputs:
        raise _format_error(request, "Not formatted correctly expecting only one of 'inputs' or 'instances' keys to exist ")
    if has_instances:
        return _from_instances(request, input_specs, budget), True
    if has_inputs:
        return _from_columns(request[_INPUTS], input_specs, budget), False
    raise status.InvalidArgument("Missing 'inputs' or 'instances' key")


def _is_named_object(value: DenseJSON) -> TypeGuard[Mapping[str, DenseJSON]]:
    return isinstance(value, dict) and not is_b64_object(value)


def _from_instances(request: Mapping[str, DenseJSON], specs: Mapping[str, DTypeLike],
                    budget: ElementBudget) -> dict[str, np.ndarray]:
    instances = request[_INSTANCES]
    if isinstance(instances, DenseArray):  # a plain list of numbers, never empty
        if len(specs) > 1:
            raise status.InvalidArgument(
                "instances is a plain list, but expecting list of objects as multiple input "
                "tensors required as per tensorinfo_map")
        name, dtype = next(iter(specs.items()))
        return {name: _batch(name, instances, dtype, budget, keyed=False)}
    if not isinstance(instances, list):
        raise _format_error(request, "Expecting 'instances' to be an list/array")
    if not instances:
        raise _format_error(request, "No values in 'instances' array")
    if not _is_named_object(instances[0]):
        if len(specs) > 1:
            raise status.InvalidArgument(
                "instances is a plain list, but expecting list of objects as multiple input "
                "tensors required as per tensorinfo_map")
        for i, item in enumerate(instances):
            if _is_named_object(item):
                raise status.InvalidArgument(f"Expecting value/list but got object at item {i} of input list")
        name, dtype = next(iter(specs.items()))
        return {name: _batch(name, instances, dtype, budget, keyed=False)}
    columns = _columns_of_objects(instances, specs)
    return {name: _batch(name, columns[name], specs[name], budget, keyed=True) for name in specs}


def _columns_of_objects(instances: list, specs: Mapping[str, DTypeLike]) -> dict[str, list]:
    columns: dict[str, list] = {name: [] for name in specs}
    expected = ",".join(sorted(specs))
    for i, item in enumerate(instances):
        if not _is_named_object(item):
            raise status.InvalidArgument(f"Expecting object but got list at item {i} of input list")
        for key, value in item.items():
            if key not in columns:
                raise status.InvalidArgument(
                    f"Failed to process element: {i} key: {key} of 'instances' list. Error: "
                    f"INVALID_ARGUMENT: JSON object: does not have named input: {key}")
            columns[key].append(value)
        if len(item) != len(specs):
            raise status.InvalidArgument(
                f"Failed to process element: {i} of 'instances' list. JSON object: "
                f"{json_value_string(item)} keys must be equal to: {expected}")
    return columns


def _batch(name: str, values: list | DenseArray, dtype: DTypeLike, budget: ElementBudget, *,
           keyed: bool) -> np.ndarray:
    """Stack one input's per-instance values; pinpoint the element on failure."""
    budget.take(dense_shape(values))
    if isinstance(values, list):
        stacked = stack_dense(values)
        whole = stacked if stacked is not None else [_parsed(v) for v in values]
    else:
        whole = values
    try:
        return json_to_array(whole, dtype)
    except (status.InvalidArgument, status.Unimplemented) as error:   # Unimplemented: a DT_HALF or DT_UINT16 input
        elements = values.value() if isinstance(values, DenseArray) else values
        if isinstance(elements, list):   # always: a DenseArray's value is a list (its rank is at least 1)
            _raise_element_error(name, elements, dtype, keyed)
        raise error


def _parsed(value: DenseJSON) -> DenseJSON:
    return value.value() if isinstance(value, DenseArray) else value


def _raise_element_error(name: str, values: list, dtype: DTypeLike, keyed: bool) -> None:
    """``AddInstanceItem``'s order: each element's own error, then its size, then its shape."""
    where = f" key: {name}" if keyed else ""
    first: Optional[np.ndarray] = None
    for i, value in enumerate(values):
        try:
            item = json_to_array(value, dtype)
        except (status.InvalidArgument, status.Unimplemented) as exc:
            raise status.InvalidArgument(
                f"Failed to process element: {i}{where} of 'instances' list. "
                f"Error: {status_string(exc)}") from None
        if first is None:
            first = item
        elif item.size != first.size:
            raise status.InvalidArgument(
                f"Failed to process element: {i}{where} of 'instances' list. Error: INVALID_ARGUMENT: "
                f"Expecting tensor size: {first.size} but got: {item.size}")
        elif item.shape != first.shape:
            raise status.InvalidArgument(
                f"Failed to process element: {i}{where} of 'instances' list. Error: INVALID_ARGUMENT: "
                f"Expecting shape {_shape_string(first.shape)} but got: {_shape_string(item.shape)}")


def _shape_string(shape: Iterable[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _from_columns(value: DenseJSON, specs: Mapping[str, DTypeLike], budget: ElementBudget) -> dict[str, np.ndarray]:
    if not _is_named_object(value):
        if len(specs) > 1:
            raise status.InvalidArgument(
                "inputs is a plain value/list, but expecting an object as multiple input tensors "
                "required as per tensorinfo_map")
        name, dtype = next(iter(specs.items()))
        return {name: json_to_array(value, dtype, budget=budget)}
    for key in value:
        if key not in specs:
            raise status.InvalidArgument(f"JSON object: does not have named input: {key}")
    out = {}
    for name, dtype in specs.items():
        if name not in value:
            raise status.InvalidArgument(f"Missing named input: {name} in 'inputs' object.")
        out[name] = json_to_array(value[name], dtype, budget=budget)
    return out


def outputs_to_rest_response(outputs: Mapping[str, np.ndarray], row_format: bool) -> bytes:
    """The Predict response body: ``{"predictions": ...}`` or ``{"outputs": ...}``.

    With one output its name is left out; with several, row format gives a
    list of ``{name: value}`` objects (all outputs must share the batch size)
    and columnar format one object of tensors. String outputs whose name ends
    in ``_bytes`` are written ``{"b64": ...}``; floats, NaN and Infinity are
    written as TF Serving writes them (``WriteDecimal``).

    The body is joined as text here (each tensor's values written once, by
    ``decimal_words`` or orjson), the bytes ``json_dumps`` would write of the
    same values.
    """
    if not outputs:
        raise status.InvalidArgument("Cannot convert empty tensor map to JSON")
    arrays = {name: np.asarray(value) for name, value in outputs.items()}
    if row_format:
        batch = _batch_size(arrays)   # MakeRowFormatJsonFromTensors checks the batch before writing a value
        for arr in arrays.values():
            _check_writable(arr)
        if len(arrays) == 1:
            (name, arr), = arrays.items()
            return b'{"predictions":' + _response_text(name, arr).encode() + b"}"
        columns = [(_key_text(name), _response_row_texts(name, arr)) for name, arr in arrays.items()]
        rows = ",".join(["{" + ",".join([key + texts[i] for key, texts in columns]) + "}" for i in range(batch)])
        return ('{"predictions":[' + rows + "]}").encode()
    for arr in arrays.values():
        _check_writable(arr)
    if len(arrays) == 1:
        (name, arr), = arrays.items()
        return b'{"outputs":' + _response_text(name, arr).encode() + b"}"
    fields = ",".join([_key_text(name) + _response_text(name, arr) for name, arr in arrays.items()])
    return ('{"outputs":{' + fields + "}}").encode()


_TF_NAMES = {np.dtype(np.complex64): "complex64", np.dtype(np.complex128): "complex128"}
_WRITABLE = frozenset(row.numpy for row in DTYPES if row.name in JSON_DTYPE_NAMES)


def _check_writable(arr: np.ndarray) -> None:
    """``AddSingleValueAndAdvance``'s default case: an output of a dtype it has no case for (float16 ``half``,
    ``uint16``, complex), with at least one value, is ``Failed to write JSON value for tensor type: half``."""
    if arr.size == 0 or arr.dtype in _WRITABLE or arr.dtype.kind in "SUO":
        return
    dtype = arr.dtype.newbyteorder("=") if arr.dtype.byteorder not in "=|" else arr.dtype
    if dtype in _WRITABLE:
        return
    try:
        name = enum_from_dtype(dtype).tf_name
    except ValueError:
        name = _TF_NAMES.get(dtype, dtype.name)
    raise status.InvalidArgument(f"Failed to write JSON value for tensor type: {name}")


def _key_text(name: str) -> str:
    """``"name":`` as JSON text (kept for the few names a server's signatures have)."""
    text = _KEYS.get(name)
    if text is None:
        text = orjson.dumps(name).decode() + ":"
        if len(_KEYS) < 4096:
            _KEYS[name] = text
    return text


_KEYS: dict[str, str] = {}


def _response_text(name: str, arr: np.ndarray) -> str:
    """One output tensor as TF Serving writes it: floats by ``WriteDecimal`` (``decimal_text``)."""
    if arr.dtype.kind == "f":
        return decimal_text(arr)
    return json_dumps(array_to_json(arr, as_b64=name.endswith(BYTES_SUFFIX))).decode()


def _response_row_texts(name: str, arr: np.ndarray) -> list[str]:
    """``_response_text`` of each ``arr[i]``: a float tensor formatted once (``decimal_row_texts``), a vector of
    ints or bools written once."""
    if arr.dtype.kind == "f":
        return decimal_row_texts(arr)
    if arr.ndim == 1 and arr.dtype.kind in "iub":
        return orjson.dumps(arr.tolist()).decode()[1:-1].split(",")
    return [_response_text(name, np.asarray(arr[i])) for i in range(arr.shape[0])]


def _request_value(name: str, arr: np.ndarray) -> JSONWithArrays:
    return array_to_json(np.asarray(arr), as_b64=name.endswith(BYTES_SUFFIX))


def _batch_size(arrays: Mapping[str, np.ndarray]) -> int:
    """The batch size all ``arrays`` share (row format); InvalidArgument in TF Serving's words if none."""
    batch = -1
    for name, arr in arrays.items():
        if arr.ndim == 0:
            raise status.InvalidArgument(f"Tensor name: {name} has no shape information ")
        if batch >= 0 and arr.shape[0] != batch:
            raise status.InvalidArgument(
                f"Tensor name: {name} has inconsistent batch size: {arr.shape[0]} expecting: {batch}")
        batch = arr.shape[0]
    return batch


def _rows(arrays: Mapping[str, np.ndarray], encode=_request_value) -> JSONWithArrays:
    batch = _batch_size(arrays)
    if len(arrays) == 1:
        (name, arr), = arrays.items()
        return encode(name, arr)
    rows: list[JSONWithArrays] = [{name: encode(name, arr[i]) for name, arr in arrays.items()} for i in range(batch)]
    return rows


def inputs_to_rest_request(inputs: ArrayLike | Mapping[str, ArrayLike], *, signature_name: Optional[str] = None,
                           row_format: bool = True) -> bytes:
    """A Predict request body from an array or a dict of arrays (client side).

    Row format sends ``instances``: a plain list for a bare array, a list of
    ``{name: value}`` objects for a dict (all inputs share the batch size).
    Columnar format sends ``inputs``: the bare tensor or an object of tensors.
    Bytes that are not UTF-8 go as ``{"b64": ...}``.
    """
    body: dict[str, object] = {}
    if signature_name:
        body["signature_name"] = signature_name
    if isinstance(inputs, Mapping):
        values = {name: array_to_json(value) for name, value in inputs.items()}
        if row_format:
            body[_INSTANCES] = _rows({name: np.asarray(v) for name, v in inputs.items()}) \
                if len(values) > 1 else _named_rows(values)
        else:
            body[_INPUTS] = values
        return json_dumps(body)
    value = array_to_json(inputs)
    if row_format and np.ndim(inputs) == 0:
        raise status.InvalidArgument("row format ('instances') needs a batch dimension; got a scalar")
    body[_INSTANCES if row_format else _INPUTS] = value
    return json_dumps(body)


def _named_rows(values: Mapping[str, JSONWithArrays]) -> list[JSONWithArrays]:
    (name, value), = values.items()
    # array_to_json's value: a list or an array, or else (a scalar, text, a b64 object) of no dimension. Then
    # np.ndim's own test (np.asarray(value).ndim: a ragged list is ValueError), which its stub refuses for JSON.
    if not isinstance(value, (list, np.ndarray)) or np.asarray(value).ndim == 0:
        raise status.InvalidArgument(f"row format ('instances') needs a batch dimension; {name} is a scalar")
    return [{name: row} for row in value]


def rest_response_to_outputs(body: bytes | str | JSON, *, output_names: Optional[Iterable[str]] = None,
                             output_dtypes: Optional[Mapping[str, DTypeLike]] = None) -> dict[str, np.ndarray]:
    """The output tensors of a Predict response body (client side).

    ``body`` is the raw body or its parsed value. A single unnamed output is
    named after the only entry of ``output_names`` if there is exactly one,
    else ``"predictions"``/``"outputs"``. ``output_dtypes`` casts each output
    to the signature's dtype (as gRPC would deliver it); strings come back as
    object arrays of ``bytes`` either way.
    """
    doc = json_loads(body) if isinstance(body, (bytes, bytearray, memoryview, str)) else body
    if not isinstance(doc, dict):
        raise status.InvalidArgument(f"response is not a JSON object: {json_value_string(doc)}")
    if "error" in doc:
        raise status.Unknown(str(doc["error"]))
    names = list(output_names or [])
    dtypes = dict(output_dtypes or {})
    if "predictions" in doc:
        columns = _row_columns(doc["predictions"], names)
    elif "outputs" in doc:
        columns = _column_values(doc["outputs"], names)
    else:
        raise status.InvalidArgument("response has neither 'predictions' nor 'outputs'")
    return {name: _output_array(value, dtypes.get(name)) for name, value in columns.items()}


def _single_name(names: list[str], default: str) -> str:
    return names[0] if len(names) == 1 else default


def _row_columns(predictions: JSON, names: list[str]) -> Mapping[str, JSON]:
    if not isinstance(predictions, list):
        raise status.InvalidArgument("'predictions' is not a list")
    if predictions and _is_named_object(predictions[0]):
        columns: dict[str, list[JSON]] = {}
        for i, row in enumerate(predictions):
            if not isinstance(row, dict):
                raise status.InvalidArgument(f"'predictions' item {i} is not an object: {json_value_string(row)}")
            for name, value in row.items():
                columns.setdefault(name, []).append(value)
        return columns
    if not predictions and len(names) > 1:
        return {name: [] for name in names}
    return {_single_name(names, "predictions"): predictions}


def _column_values(outputs: JSON, names: list[str]) -> Mapping[str, JSON]:
    named = _is_named_object(outputs)
    if named and isinstance(outputs, dict):   # the isinstance reads it as JSON's dict (the TypeGuard: DenseJSON's)
        return dict(outputs)
    return {_single_name(names, "outputs"): outputs}


def _output_array(value: JSON, dtype: Optional[DTypeLike]) -> np.ndarray:
    if dtype is not None and enum_from_dtype(dtype).is_string:
        return _bytes_array(value)
    try:
        arr = np.array(value) if dtype is None else np.array(value, dtype=dtype)
    except (ValueError, TypeError):
        arr = None
    if arr is None or arr.dtype.kind in "OU":
        return _bytes_array(value)
    return arr


def _bytes_array(value: JSON) -> np.ndarray:
    arr = np.array(value, dtype=object)
    flat = arr.reshape(-1)
    out = np.empty(flat.size, dtype=object)
    for i, item in enumerate(flat.tolist()):
        if isinstance(item, dict):
            out[i] = decode_b64_object(item)
        elif isinstance(item, str):
            out[i] = item.encode("utf-8")
        else:
            raise status.InvalidArgument(f"expected a string output, got {json_value_string(item)}")
    return out.reshape(arr.shape)
