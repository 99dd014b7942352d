"""One exception tree over both transports: every server code maps to the same class."""
from __future__ import annotations

import grpc
import httpx
import numpy as np
import pytest

from serving import status
from serving.client import NO_RETRY, GrpcClient, RestClient, errors
from serving.client._rest_protocol import error_from_http
from tests.support.ports import free_port

CODES = [code for code in status.Code if code != status.Code.OK]
# HTTP statuses TF Serving shares between codes: over plain REST the client can
# only name the most common one (serving.status.from_http_status).
SHARED_HTTP = {status.Code.FAILED_PRECONDITION, status.Code.OUT_OF_RANGE, status.Code.ALREADY_EXISTS,
               status.Code.UNKNOWN, status.Code.DATA_LOSS}
INPUT = {"images": np.ones((1, 8, 8, 1), np.float32)}


def _raised(client, backend, code) -> errors.ServingError:
    backend.fail(code, f"injected {code.name}")
    with pytest.raises(errors.ServingError) as info:
        client.predict("digits", INPUT)
    return info.value


@pytest.mark.parametrize("code", CODES, ids=lambda c: c.name)
def test_every_code_raises_its_class_over_grpc_and_rest(code, grpc_target, rest_url, backend):
    with GrpcClient(grpc_target, retry=NO_RETRY) as grpc_client, RestClient(rest_url, retry=NO_RETRY) as rest:
        rest.metadata("digits")  # prime the signature cache, so the injected failure hits predict
        over_grpc, over_rest = _raised(grpc_client, backend, code), _raised(rest, backend, code)
    assert type(over_grpc) is type(status.error_for(code, "")) and over_grpc.code == code
    assert over_grpc.details == over_rest.details == f"injected {code.name}"
    expected_rest = status.from_http_status(status.to_http_status(code)) if code in SHARED_HTTP else code
    assert over_rest.code == expected_rest
    assert type(over_rest) is type(status.error_for(expected_rest, ""))
    assert isinstance(over_grpc.__cause__, grpc.RpcError)
    assert over_rest.__cause__ is None  # an HTTP error status is an answer, not an httpx exception


@pytest.mark.parametrize("code", sorted(SHARED_HTTP), ids=lambda c: c.name)
def test_a_shared_http_status_reads_as_its_most_common_code_from_status_and_body_alone(code):
    http_status = status.to_http_status(code)
    error = error_from_http(http_status, b'{"error": "from the body"}')
    assert error.code == status.from_http_status(http_status) != code
    assert type(error) is type(status.error_for(error.code, "")) and error.details == "from the body"


def test_transport_failures_are_chained_not_leaked(backend):
    dead = free_port()
    with GrpcClient(f"127.0.0.1:{dead}", retry=NO_RETRY, timeout=5) as grpc_client, \
            RestClient(f"http://127.0.0.1:{dead}", retry=NO_RETRY, timeout=5) as rest:
        with pytest.raises(errors.Unavailable) as over_grpc:
            grpc_client.predict("digits", INPUT)
        with pytest.raises(errors.Unavailable) as over_rest:
            rest.status("digits")
    assert isinstance(over_grpc.value.__cause__, grpc.RpcError)
    assert isinstance(over_rest.value.__cause__, httpx.ConnectError)


def test_non_json_error_bodies_keep_their_text(backend):
    error = error_from_http(502, b"<html>bad gateway</html>")
    assert isinstance(error, errors.Unavailable) and error.details == "<html>bad gateway</html>"


def test_the_batch_size_refusal_keeps_the_server_text_and_says_where_the_cap_is(grpc_target, rest_url, backend):
    server_text = "Task size 65 is larger than maximum input batch size 64"  # TF Serving's wording
    with GrpcClient(grpc_target, retry=NO_RETRY) as grpc_client, RestClient(rest_url, retry=NO_RETRY) as rest:
        rest.metadata("digits")
        refused = []
        for client in (grpc_client, rest):
            backend.fail(status.Code.INVALID_ARGUMENT, server_text)
            with pytest.raises(errors.InvalidArgument) as info:
                client.predict("digits", INPUT)
            refused.append(info.value.details)
    assert refused[0] == refused[1] == (
        f"{server_text}; the server batches with max_batch_size 64 (its --batching_parameters_file, e.g. "
        "serving/batching.cpu.config under make up); split the request into batches of at most 64 rows, "
        "or raise max_batch_size")


def test_other_refusals_are_the_server_text_alone():
    error = error_from_http(400, b'{"error": "Task size was fine"}')
    assert error.details == "Task size was fine"
    unavailable = error_from_http(503, b'{"error": "Task size 9 is larger than maximum input batch size 8"}')
    assert unavailable.details == "Task size 9 is larger than maximum input batch size 8"  # not INVALID_ARGUMENT
