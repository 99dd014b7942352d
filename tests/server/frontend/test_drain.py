"""SIGTERM drains: listeners close at once, requests in flight finish, the process exits 0."""
from __future__ import annotations

import signal
import socket
import threading
import time

import grpc
import httpx
import numpy as np

from tests.support.contract.clients import StubGrpcClient
from tests.support.serving import metric_total, tiny_flags
from tests.support.wait import wait_until
from tests.support.servers import EmbeddedServer

SLEEP_SECONDS = 6.0
# Batches of one on two batch threads: each request runs alone, and the server's own
# processed_batch_size count says when both are running inside the model.
BATCHING = ("max_batch_size { value: 1 }\nbatch_timeout_micros { value: 0 }\n"
            "num_batch_threads { value: 2 }\n")
STARTED = ":tensorflow:serving:batching_session:processed_batch_size_count"


def _accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def _grpc_refuses_new_calls(target: str) -> bool:
    from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc  # TensorFlow: at call time

    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = "tiny"
    with grpc.insecure_channel(target) as channel:
        try:
            model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(request, timeout=2)
            return False
        except grpc.RpcError as exc:
            assert exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED), exc
            return True


def test_sigterm_finishes_in_flight_requests_refuses_new_ones_and_exits_0(tiny_repo):
    batching = tiny_repo / "drain.batching.config"
    batching.write_text(BATCHING)
    server = EmbeddedServer(tiny_flags(tiny_repo, "--enable_batching", f"--batching_parameters_file={batching}"),
                            wait_for=["tiny"]).start()
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
        started = metric_total(server, STARTED)
        for caller in callers:
            caller.start()
        wait_until(lambda: metric_total(server, STARTED) >= started + 2, "both requests run inside the model")
        server.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: not _accepts_connections(server.rest_port), "REST stops accepting")
        assert server.proc.poll() is None, "the process must wait for the requests in flight"
        assert not results, f"REST must stop accepting at once, while requests are in flight: {results}"
        wait_until(lambda: _grpc_refuses_new_calls(server.grpc_target), "gRPC refuses new calls")
        assert server.proc.poll() is None and not results, f"gRPC must refuse new calls while draining: {results}"
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
