"""SIGTERM drains: listeners close at once, requests in flight finish, the process exits 0."""
from __future__ import annotations

import signal
import socket
import threading
import time

import grpc
import httpx
import numpy as np

from tests.contract.clients import StubGrpcClient
from tests.server.frontend.conftest import tiny_flags
from tests.support.servers import EmbeddedServer

SLEEP_SECONDS = 4.0


def _accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def test_sigterm_finishes_in_flight_requests_refuses_new_ones_and_exits_0(tiny_repo):
    server = EmbeddedServer(tiny_flags(tiny_repo), wait_for=["tiny"]).start()
    results: dict[str, object] = {}

    def rest_call() -> None:
        try:
            results["rest"] = httpx.post(f"{server.rest_url}/v1/models/tiny:predict", timeout=60,
                                         json={"signature_name": "sleep", "instances": [SLEEP_SECONDS]})
        except Exception as exc:  # noqa: BLE001 - asserted below
            results["rest"] = exc

    def grpc_call() -> None:
        client = StubGrpcClient(server.grpc_target)
        try:
            results["grpc"] = client.predict("tiny", {"seconds": np.array([SLEEP_SECONDS], np.float32)},
                                             signature="sleep", timeout=60)
        except Exception as exc:  # noqa: BLE001
            results["grpc"] = exc
        finally:
            client.close()

    callers = [threading.Thread(target=rest_call), threading.Thread(target=grpc_call)]
    try:
        for caller in callers:
            caller.start()
        time.sleep(1.5)            # both requests are running inside the model now
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert server.proc.poll() is None, "the process must wait for the requests in flight"
        assert not _accepts_connections(server.rest_port), "REST must stop accepting at once"
        with grpc.insecure_channel(server.grpc_target) as channel:
            from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

            request = get_model_status_pb2.GetModelStatusRequest()
            request.model_spec.name = "tiny"
            try:
                model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(request, timeout=2)
                raise AssertionError("gRPC must refuse new calls while draining")
            except grpc.RpcError as exc:
                assert exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        for caller in callers:
            caller.join(60)
        exit_code = server.proc.wait(60)
    finally:
        server.stop()
    rest = results["rest"]
    assert isinstance(rest, httpx.Response) and rest.status_code == 200, rest
    assert rest.json() == {"predictions": [SLEEP_SECONDS]}
    assert not isinstance(results["grpc"], Exception), results["grpc"]
    np.testing.assert_allclose(results["grpc"]["slept"], [SLEEP_SECONDS])
    assert exit_code == 0, server.log_tail()
    assert "Received SIGTERM; draining" in server.log_tail(200)


def test_sigterm_on_an_idle_server_exits_0_promptly(tiny_repo):
    server = EmbeddedServer(tiny_flags(tiny_repo), wait_for=["tiny"]).start()
    try:
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        exit_code = server.proc.wait(60)
    finally:
        server.stop()
    assert exit_code == 0, server.log_tail()
    assert time.monotonic() - started < 30   # generous: nothing to drain, no grace period waited out
