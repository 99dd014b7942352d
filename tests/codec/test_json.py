"""JSON text with TF Serving's NaN/Infinity, and hostile documents."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from serving import codec, status


def test_loads_accepts_nan_and_infinity_tokens():
    value = codec.json_loads(b'{"x": [NaN, Infinity, -Infinity, 1.5]}')
    x = value["x"]
    assert math.isnan(x[0]) and x[1] == math.inf and x[2] == -math.inf and x[3] == 1.5


@pytest.mark.parametrize("body", [b"[" * 500_000, b"[NaN," + b"[" * 500_000, b'{"a":' * 500_000,
                                  ("[" * 500_000 + "]" * 500_000).encode()],
                         ids=["open-arrays", "nan-then-deep", "objects", "balanced"])
def test_loads_rejects_deep_nesting_with_invalid_argument_not_recursion_error(body):
    with pytest.raises(status.InvalidArgument, match="nested deeper than 1024"):
        codec.json_loads(body)


def test_loads_accepts_nesting_up_to_the_limit():
    depth = 500
    assert codec.json_loads("[" * depth + "1" + "]" * depth) is not None


@pytest.mark.parametrize("body,message", [
    (b"", "The document is empty"),
    (b"   ", "The document is empty"),
    (b'{"instances": [1,', "JSON Parse error"),
    (b"{'single': 1}", "JSON Parse error"),
    (b'{"a": 1} trailing', "JSON Parse error"),
])
def test_loads_reports_malformed_documents_with_tf_serving_prefix(body, message):
    with pytest.raises(status.InvalidArgument, match=message) as info:
        codec.json_loads(body)
    assert info.value.code == status.Code.INVALID_ARGUMENT


def test_dumps_writes_non_finite_values_as_tf_serving_does():
    body = codec.json_dumps({"f32": np.array([[1.0, np.nan], [np.inf, -np.inf]], np.float32),
                             "py": [float("nan"), 2.0], "scalar": np.float64("-inf")})
    assert body == b'{"f32":[[1.0,NaN],[Infinity,-Infinity]],"py":[NaN,2.0],"scalar":-Infinity}'


def test_dumps_non_finite_output_parses_back_with_stdlib_json():
    x = np.array([0.5, np.nan, -np.inf, 3.25], np.float64)
    back = np.array(json.loads(codec.json_dumps(x)))
    np.testing.assert_array_equal(back, x)


def test_dumps_float32_uses_shortest_float32_form():
    # Not 0.10000000149011612. The exponent is orjson's to spell (the SDK takes a range of it): 3.11 writes
    # 1e20, 3.13 writes 1e+20; both are JSON and read back to the same float32. The REST server's responses
    # use TF Serving's own rule instead (serving/codec/_decimal.py, tests/codec/test_decimal.py).
    assert codec.json_dumps(np.array([0.1, 1e20, 3.0], np.float32)) in (b"[0.1,1e20,3.0]", b"[0.1,1e+20,3.0]")


@pytest.mark.parametrize("dtype", [np.int8, np.uint64, np.bool_, np.float16, np.int64])
def test_dumps_numpy_arrays_scalars_and_views(dtype):
    x = np.arange(12).astype(dtype).reshape(3, 4)[:, ::2]
    assert json.loads(codec.json_dumps({"v": x, "s": x[0, 0], "z": np.array(x[1, 1])})) == {
        "v": x.tolist(), "s": x[0, 0].item(), "z": x[1, 1].item()}


def test_dumps_zero_size_arrays():
    assert codec.json_dumps(np.zeros((2, 0), np.float32)) == b"[[],[]]"


def test_round_trip_keeps_values():
    value = {"a": [1, 2.5, "x", None, True], "b": {"c": []}}
    assert codec.json_loads(codec.json_dumps(value)) == value
