"""The asyncio twins: same methods and answers as the sync clients, same errors and retries."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from serving import status
from serving.client import AsyncGrpcClient, AsyncRestClient, GrpcClient, RestClient, RetryPolicy, errors

INPUT = {"images": np.ones((2, 8, 8, 1), np.float32)}
QUICK = RetryPolicy(max_attempts=4, initial_backoff=0.01, max_backoff=0.02)


@pytest.fixture(params=["grpc", "rest"])
def pair(request, grpc_target, rest_url):
    """(async client factory, sync client) for one transport."""
    if request.param == "grpc":
        return (lambda **kw: AsyncGrpcClient(grpc_target, **kw)), GrpcClient(grpc_target)
    return (lambda **kw: AsyncRestClient(rest_url, **kw)), RestClient(rest_url)


@pytest.mark.asyncio
async def test_async_answers_equal_the_sync_client(pair):
    make_async, sync = pair
    with sync:
        expected = (sync.predict("digits", INPUT), sync.metadata("digits"), sync.status("digits"),
                    sync.classify("text", [{"text": "abc"}], signature="classification"))
    async with make_async() as client:
        outputs = await client.predict("digits", INPUT)
        metadata = await client.metadata("digits")
        versions = await client.status("digits")
        classes = await client.classify("text", [{"text": "abc"}], signature="classification")
    for name, value in expected[0].items():
        assert outputs[name].dtype == value.dtype
        np.testing.assert_array_equal(outputs[name], value)
    assert (metadata, versions, classes) == expected[1:]


@pytest.mark.asyncio
async def test_async_concurrent_calls_share_one_client(pair):
    make_async, _ = pair
    async with make_async() as client:
        results = await asyncio.gather(*(client.predict("digits", INPUT) for _ in range(8)))
    assert all(r["probabilities"].shape == (2, 10) for r in results)


@pytest.mark.asyncio
async def test_async_retries_unavailable_then_succeeds(pair, backend):
    make_async, _ = pair
    async with make_async(retry=QUICK) as client:
        await client.metadata("digits")
        backend.fail(status.Code.UNAVAILABLE, "busy", 2)
        outputs = await client.predict("digits", INPUT)
    assert outputs["probabilities"].shape == (2, 10) and backend.calls["predict"] == 3


@pytest.mark.asyncio
async def test_async_does_not_retry_invalid_argument(pair, backend):
    make_async, _ = pair
    async with make_async(retry=QUICK) as client:
        await client.metadata("digits")
        backend.fail(status.Code.INVALID_ARGUMENT, "bad input", 1)
        with pytest.raises(errors.InvalidArgument, match="bad input"):
            await client.predict("digits", INPUT)
    assert backend.calls["predict"] == 1


@pytest.mark.asyncio
async def test_async_deadline_exceeded(pair, backend):
    make_async, _ = pair
    async with make_async(retry=QUICK) as client:
        await client.metadata("digits")
        backend.delay = 3.0
        with pytest.raises(errors.DeadlineExceeded):
            await client.predict("digits", INPUT, timeout=0.3)


@pytest.mark.asyncio
async def test_async_rest_reload_config_is_unimplemented(rest_url):
    async with AsyncRestClient(rest_url) as client:
        with pytest.raises(errors.Unimplemented):
            await client.reload_config("model_config_list { }")


@pytest.mark.asyncio
async def test_async_grpc_reload_config(grpc_target, backend):
    async with AsyncGrpcClient(grpc_target) as client:
        await client.reload_config('model_config_list { config { name: "digits" base_path: "/m" } }')
    assert [c.name for c in backend.reload_configs[-1].model_config_list.config] == ["digits"]
