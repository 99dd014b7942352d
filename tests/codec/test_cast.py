"""``codec.cast_to_spec``: the one input contract of the SDK's clients (exact casts only, refusals named)."""
from __future__ import annotations

import numpy as np
import pytest

from serving import status
from serving.codec import TensorSpec, cast_to_spec


def spec(dtype, name="x") -> TensorSpec:
    return TensorSpec(name, np.dtype(dtype), (None,))


F32, F16, I64, I32, U8, B, S = (spec(t) for t in (np.float32, np.float16, np.int64, np.int32, np.uint8, np.bool_, object))
INT64_RANGE = "[-9223372036854775808, 9223372036854775807]"


@pytest.mark.parametrize("target,value,expected", [
    (F32, np.array([0.1, 1e30, -2.5]), np.array([0.1, 1e30, -2.5], np.float32)),   # rounds, as JSON does
    (F32, [0.1, 2], np.array([0.1, 2.0], np.float32)),
    (F32, np.array([1, -2**24]), np.array([1, -2**24], np.float32)),
    (F32, np.array([np.inf, -np.inf, np.nan]), np.array([np.inf, -np.inf, np.nan], np.float32)),
    (F32, 3.0, np.float32(3.0)),
    (F32, [], np.zeros(0, np.float32)),
    (F16, [65504.0], np.array([65504.0], np.float16)),
    (I64, [1.0, -2.0], np.array([1, -2], np.int64)),
    (I64, np.array([-2.0**63]), np.array([-2**63], np.int64)),
    (I64, [2**63 - 1], np.array([2**63 - 1], np.int64)),
    (I32, np.array([1, 2], np.uint64), np.array([1, 2], np.int32)),
    (U8, np.array([0, 255], np.int64), np.array([0, 255], np.uint8)),
    (B, [True, False], np.array([True, False])),
    (S, ["a", b"\xff", "é"], np.array([b"a", b"\xff", "é".encode()], dtype=object)),
    (S, np.array(["ab", "c"]), np.array([b"ab", b"c"], dtype=object)),
    (S, np.array([b"ab"]), np.array([b"ab"], dtype=object)),
    (S, [[b"a"], [b"b"]], np.array([[b"a"], [b"b"]], dtype=object)),
], ids=repr)
def test_exact_casts_give_the_signature_dtype(target, value, expected):
    out = cast_to_spec("x", value, target)
    assert out.dtype == expected.dtype and out.shape == np.shape(expected)
    np.testing.assert_array_equal(out, expected)  # elementwise, NaN equal to NaN


def test_an_array_of_the_signature_dtype_is_passed_as_it_is():
    arr = np.zeros((4, 3), np.float32)
    assert cast_to_spec("x", arr, F32) is arr


@pytest.mark.parametrize("target,value,message", [
    (I64, [1.5, 2], 'input "x": cannot cast DT_DOUBLE to DT_INT64: 1.5 is not a whole number'),
    (I64, np.array([np.nan]), 'input "x": cannot cast DT_DOUBLE to DT_INT64: nan is not a whole number'),
    (I64, np.array([2.0**63]), 'input "x": cannot cast DT_DOUBLE to DT_INT64: 9.223372036854776e+18 '
                               f"is out of DT_INT64's range {INT64_RANGE}"),
    (I64, [2**70], f"input \"x\": cannot cast int to DT_INT64: 1180591620717411303424 is out of DT_INT64's "
                   f"range {INT64_RANGE}"),
    (I64, [2**64 - 1], 'input "x": cannot cast DT_UINT64 to DT_INT64: 18446744073709551615 '
                       f"is out of DT_INT64's range {INT64_RANGE}"),
    (I32, np.array([3_000_000_000]), 'input "x": cannot cast DT_INT64 to DT_INT32: 3000000000 '
                                     "is out of DT_INT32's range [-2147483648, 2147483647]"),
    (U8, [-1], "input \"x\": cannot cast DT_INT64 to DT_UINT8: -1 is out of DT_UINT8's range [0, 255]"),
    (F32, [1e300], "input \"x\": cannot cast DT_DOUBLE to DT_FLOAT: 1e+300 is out of DT_FLOAT's range "
                   "(largest magnitude 3.4028234663852886e+38)"),
    (F16, [70000.0], "input \"x\": cannot cast DT_DOUBLE to DT_HALF: 70000.0 is out of DT_HALF's range "
                     "(largest magnitude 65504.0)"),
    (F32, np.array([2**24 + 1]), 'input "x": cannot cast DT_INT64 to DT_FLOAT: 16777217 has no exact DT_FLOAT '
                                 "value (integers up to 16777216 in magnitude have)"),
    (F32, ["abc"], "input \"x\": cannot cast DT_STRING to DT_FLOAT: 'abc' is a string, not a number"),
    (F32, [1, "a"], "input \"x\": cannot cast DT_STRING to DT_FLOAT: 'a' is a string, not a number"),
    (F32, np.array([b"7"]), "input \"x\": cannot cast DT_STRING to DT_FLOAT: '7' is a string, not a number"),
    (F32, [True], 'input "x": cannot cast DT_BOOL to DT_FLOAT: True is a bool, not a number'),
    (F32, [None], 'input "x": cannot cast NoneType to DT_FLOAT: None is not a number'),
    (B, [1], 'input "x": cannot cast DT_INT64 to DT_BOOL: 1 is a number, not a bool'),
    (S, [3], 'input "x": cannot cast DT_INT64 to DT_STRING: 3 is a number, not a string'),
    (S, np.array([1.5]), 'input "x": cannot cast DT_DOUBLE to DT_STRING: 1.5 is a number, not a string'),
    (F32, [[1, 2], [3]], 'input "x": the value is not a dense tensor (every list at one level must have '
                         "the same length, and scalars sit at one depth)"),
], ids=repr)
def test_unsafe_casts_are_refused_naming_input_dtypes_and_value(target, value, message):
    with pytest.raises(status.InvalidArgument) as refused:
        cast_to_spec("x", value, target)
    assert refused.value.details == message and refused.value.code == status.Code.INVALID_ARGUMENT


def test_a_numpy_array_and_the_same_python_list_get_the_same_refusal():
    with pytest.raises(status.InvalidArgument) as from_numpy:
        cast_to_spec("ids", np.array([[1.0], [2.5]]), spec(np.int64, "ids"))
    with pytest.raises(status.InvalidArgument) as from_list:
        cast_to_spec("ids", [[1.0], [2.5]], spec(np.int64, "ids"))
    assert from_numpy.value.details == from_list.value.details


def test_an_unknown_input_or_uncarried_dtype_is_left_to_the_server():
    assert cast_to_spec("y", [1.5], None).dtype == np.float64
    resource = TensorSpec("r", np.dtype(object), None, dtype_enum=20)
    assert cast_to_spec("r", [1], resource).tolist() == [1]
