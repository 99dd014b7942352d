"""Memory admission's rules on their own: the warmup line fit, bytes counted as TensorFlow holds them,
the per-request and in-flight budgets with messages naming rule and numbers, the REST body budget,
the budgets' defaults from memory, and the peak measurement itself (real /proc, real allocations)."""
from __future__ import annotations

import numpy as np
import pytest
from tensorflow_serving.apis import input_pb2

from serving import status
from serving.server.admission import (
    TF_STRING_HEADER_BYTES,
    UNMEASURED_INPUT_FACTOR,
    LineFit,
    MemoryAdmission,
    MemoryProfile,
    RequestCost,
    array_bytes,
    examples_cost,
    predict_cost,
)
from serving.server.flags import ServerFlags, effective_memory_budgets, memory_budget_bytes
from serving.server.frontends.rest_limits import BodyBytes, BodyCharge, RequestRefused
from serving.server.memory import peak_rss_during

MIB = 1 << 20


def test_the_line_goes_through_the_fewest_and_the_most_rows_measured():
    fit = LineFit.through([(1, 64_000), (64, 1_072_000), (8, 5_000_000)])   # a noisy middle point is ignored
    assert fit.bytes_per_row == 16_000 and fit.fixed_bytes == 48_000 and fit.measured_rows == (1, 64)
    assert fit.project(500_000) == 48_000 + 16_000 * 500_000


def test_a_flat_or_falling_line_projects_the_largest_batch_per_row_instead():
    assert LineFit.through([(1, 512_000), (64, 400_000)]) == LineFit(0, 6250, (64,))
    assert LineFit.through([(32, 320_000)]) == LineFit(0, 10_000, (32,))


def test_a_broadcast_string_counts_its_bytes_once_per_element_without_materialising():
    one = np.empty((), dtype=object)
    one[()] = b"a" * 1_000_000
    broadcast = np.broadcast_to(one, (4000,))
    assert array_bytes(broadcast) == 4000 * (1_000_000 + TF_STRING_HEADER_BYTES)
    explicit = np.array([b"ab", b"cde"], dtype=object)
    assert array_bytes(explicit) == 5 + 2 * TF_STRING_HEADER_BYTES
    assert array_bytes(np.broadcast_to(np.float32(1), (500_000, 8, 8, 1))) == 500_000 * 64 * 4


def test_a_predict_is_projected_from_its_rows_and_the_measured_line():
    profile = MemoryProfile({"serving_default": LineFit(1000, 16_000, (1, 64))})
    images = np.broadcast_to(np.float32(1), (500_000, 8, 8, 1))
    cost = predict_cost(profile, "serving_default", {"images": images})
    assert cost.rows == 500_000 and cost.input_bytes == 128_000_000
    assert cost.projected_bytes == 1000 + 16_000 * 500_000 + 128_000_000
    unmeasured = predict_cost(None, "serving_default", {"images": images})
    assert unmeasured.projected_bytes == UNMEASURED_INPUT_FACTOR * 128_000_000
    assert "not measured (no warmup)" in unmeasured.how


def test_classify_counts_the_context_copied_into_every_example():
    request = input_pb2.Input()
    with_context = request.example_list_with_context
    with_context.context.features.feature["blob"].bytes_list.value.append(b"c" * 100_000)
    for _ in range(20_000):
        with_context.examples.add()
    cost = examples_cost(None, "classification", request)
    context = with_context.context.ByteSize()
    assert cost.rows == 20_000 and cost.input_bytes == 20_000 * (context + TF_STRING_HEADER_BYTES)
    assert cost.input_bytes > 2_000_000_000 > request.ByteSize() * 10_000


def test_over_the_per_request_budget_is_invalid_argument_naming_the_rule_and_numbers():
    admission = MemoryAdmission(per_request_bytes=100 * MIB, in_flight_bytes=None)
    cost = RequestCost(500_000, 128_000_000, 8_000_000_000, "500000 rows x ...")
    with pytest.raises(status.InvalidArgument) as refused:
        with admission.admit("digits", cost):
            pytest.fail("ran")
    message = refused.value.details
    assert "--max_request_memory_bytes" in message and "8000000000 bytes" in message
    assert f"{100 * MIB} bytes" in message and "digits" in message and "500000 rows" in message
    assert admission.admitted_bytes == 0


def test_the_in_flight_budget_refuses_with_resource_exhausted_while_others_hold_memory():
    admission = MemoryAdmission(per_request_bytes=None, in_flight_bytes=100 * MIB, release_after_bytes=1 << 62)
    big = RequestCost(1, 0, 60 * MIB, "")
    with admission.admit("m", big):
        assert admission.admitted_bytes == 60 * MIB
        with pytest.raises(status.ResourceExhausted) as refused:
            with admission.admit("m", big):
                pytest.fail("ran")
        assert "--max_in_flight_memory_bytes" in refused.value.details
        with admission.admit("m", RequestCost(1, 0, 30 * MIB, "")):   # what still fits runs
            pass
    assert admission.admitted_bytes == 0
    with admission.admit("m", RequestCost(1, 0, 200 * MIB, "")):   # alone, a request passes (per-request bounds it)
        pass


def test_rest_bodies_in_flight_share_one_byte_budget_and_give_it_back_once():
    given_back = []
    pool = BodyBytes(100, given_back.append)
    first, second = BodyCharge(pool), BodyCharge(pool)
    first.take(60)
    with pytest.raises(RequestRefused) as refused:
        second.take(50)
    assert refused.value.http_status == 429 and "--rest_api_max_body_bytes_in_flight" in refused.value.details
    assert refused.value.code == status.Code.RESOURCE_EXHAUSTED
    first.release()
    first.release()
    assert pool.held == 0 and given_back == [60]
    second.take(100)
    assert pool.held == 100


def test_default_budgets_are_shares_of_memory_and_flags_override_them():
    assert effective_memory_budgets(ServerFlags(), memory_bytes=24 << 30) == (3 << 30, 12 << 30, 3 << 30)
    flags = ServerFlags(max_request_memory_bytes=5, max_in_flight_memory_bytes=6, rest_api_max_body_bytes_in_flight=7)
    assert effective_memory_budgets(flags, memory_bytes=24 << 30) == (5, 6, 7)
    memory = memory_budget_bytes()
    assert memory is not None and 0 < memory <= 1 << 50


def test_the_peak_measured_is_what_the_run_touched():
    def touch() -> int:
        block = np.ones(64 * MIB, np.uint8)   # written: resident
        return int(block[-1])

    result, peak = peak_rss_during(touch)
    assert result == 1
    assert peak is not None and 60 * MIB <= peak < 200 * MIB, peak
    _, idle = peak_rss_during(lambda: None)
    assert idle is not None and idle < 16 * MIB, idle

