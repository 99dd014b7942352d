"""``ElementBudget``: a request's tensors are counted from their shapes before anything is allocated."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from serving import codec, status
from serving.wire import apis

LIMIT = 1000


def broadcast(shape, value: float = 1.5) -> apis.TensorProto:
    """One float filling ``shape`` (TensorFlow's rule): a few bytes on the wire, any size once decoded."""
    proto = apis.TensorProto(dtype=1)  # DT_FLOAT
    for size in shape:
        proto.tensor_shape.dim.add().size = size
    proto.float_val.append(value)
    return proto


def test_a_broadcast_past_the_limit_is_refused_before_anything_is_allocated():
    tracemalloc.start()
    try:
        with pytest.raises(status.InvalidArgument) as refused:
            codec.tensor_proto_to_ndarray(broadcast([1_000_000, 8, 8, 1]), budget=codec.ElementBudget(LIMIT))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # the 256 MB array was never built
    message = refused.value.details
    assert "64000000 elements" in message and "[1000000,8,8,1]" in message
    assert f"limit of {LIMIT} elements per request" in message and "--max_tensor_elements" in message


def test_the_limit_counts_every_tensor_of_a_request_together():
    budget = codec.ElementBudget(LIMIT)
    codec.tensor_proto_to_ndarray(broadcast([600]), budget=budget)
    with pytest.raises(status.InvalidArgument, match="at least 1200 elements"):
        codec.tensor_proto_to_ndarray(broadcast([600]), budget=budget)


def test_element_counts_are_exact_where_int64_would_wrap_around():
    shape = [2**40, 2**40, 3]  # int64 product: 0, which let "1 value fills 0 elements" through
    assert codec.tensor_proto_shape(broadcast(shape)) == tuple(shape)
    with pytest.raises(status.InvalidArgument, match=str(3 * 2**80)):
        codec.ElementBudget(2**62).take(shape)


def test_a_tensor_within_the_limit_decodes_with_tensorflows_broadcast_rule():
    array = codec.tensor_proto_to_ndarray(broadcast([2, 3], 4.0), budget=codec.ElementBudget(6))
    np.testing.assert_array_equal(array, np.full((2, 3), 4.0, np.float32))
    proto = broadcast([5])
    proto.float_val[:] = [1.0, 2.0]
    np.testing.assert_array_equal(codec.tensor_proto_to_ndarray(proto), [1, 2, 2, 2, 2])


def test_no_budget_means_no_limit_and_a_negative_dimension_is_invalid():
    assert codec.ElementBudget(None).take([2**62, 2**62]) is None
    proto = broadcast([2, 3])
    proto.tensor_shape.dim[0].size = -1
    with pytest.raises(ValueError, match="negative dimension"):
        codec.tensor_proto_shape(proto)


@pytest.mark.parametrize("body", [
    {"instances": [[1.0, 2.0]] * 501},
    {"inputs": [[1.0, 2.0]] * 501},
    {"inputs": {"a": [[1.0] * 10] * 60, "b": [[1.0] * 10] * 41}},
    {"instances": [{"a": [1.0] * 10, "b": [1.0] * 10}] * 51},
], ids=["row", "columnar", "columnar-two-inputs", "row-two-inputs"])
def test_rest_bodies_past_the_limit_are_refused_before_the_arrays_are_built(body):
    specs = {"a": np.float32, "b": np.float32} if "b" in str(body) else {"x": np.float32}
    with pytest.raises(status.InvalidArgument, match="--max_tensor_elements"):
        codec.rest_request_to_inputs(body, specs, max_elements=LIMIT)
    inputs, _ = codec.rest_request_to_inputs(body, specs)  # no limit: the same body decodes
    assert sum(a.size for a in inputs.values()) > LIMIT


def test_json_to_array_charges_its_budget_from_the_values_shape():
    budget = codec.ElementBudget(4)
    np.testing.assert_array_equal(codec.json_to_array([[1, 2], [3, 4]], np.int32, budget=budget), [[1, 2], [3, 4]])
    with pytest.raises(status.InvalidArgument, match="one of shape \\[1\\] holds 1"):
        codec.json_to_array([5], np.int32, budget=budget)


@pytest.mark.parametrize("values", [[2.5], []], ids=["one-value", "no-value"])
def test_a_tensor_filled_from_one_value_is_a_read_only_view_that_allocates_nothing(values):
    proto = broadcast([1_000_000, 8, 8, 1])
    proto.float_val[:] = values
    tracemalloc.start()
    try:
        array = codec.tensor_proto_to_ndarray(proto)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20 and array.shape == (1_000_000, 8, 8, 1) and not array.flags.writeable
    assert array[123, 4, 5, 0] == (values[0] if values else 0.0) and array.dtype == np.float32
