"""Server-level flags: REST on the gRPC port, the UNIX socket listener, config-file polling."""
from __future__ import annotations

import os
import sys
import time

import pytest

from serving import status
from serving.checkout import REPO_ROOT
from tests.support.contract.clients import StubGrpcClient
from tests.support.ports import free_port
from tests.support.processes import LoggedProcess
from tests.support.servers import EmbeddedServer


def _config(entries: dict[str, str]) -> str:
    body = "".join(f"  config {{ name: '{name}' base_path: '{path}' model_platform: 'tensorflow' }}\n"
                   for name, path in entries.items())
    return "model_config_list {\n" + body + "}\n"


def test_rest_port_equal_to_grpc_port_skips_rest_with_tf_servings_error_and_serves_grpc(tiny_repo, tmp_path):
    port = free_port()
    log = tmp_path / "server.log"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    server = LoggedProcess([sys.executable, "-m", "serving.server", f"--port={port}", f"--rest_api_port={port}",
                            "--model_name=tiny", f"--model_base_path={tiny_repo / 'tiny'}"], log, cwd=REPO_ROOT, env=env)
    server.start(lambda: "Running gRPC ModelServer" in server.text(), "the server", 180, every=0.3)
    try:
        client = StubGrpcClient(f"127.0.0.1:{port}")
        try:
            assert client.status("tiny")[0].state == "AVAILABLE"
        finally:
            client.close()
        text = server.text()
        assert "server_options.http_port cannot be same as grpc_port" in text
        assert "Exporting HTTP/REST API" not in text
    finally:
        assert server.stop(60) == 0


def test_unix_socket_listener_and_config_file_polling_add_a_model(tiny_repo, tmp_path):
    config = tmp_path / "models.config"
    config.write_text(_config({"tiny": tiny_repo / "tiny"}))
    socket_path = tmp_path / "grpc.sock"
    flags = [f"--model_config_file={config}", "--model_config_file_poll_wait_seconds=1",
             f"--grpc_socket_path={socket_path}"]
    with EmbeddedServer(flags, wait_for=["tiny"]):
        client = StubGrpcClient(f"unix:{socket_path}")
        try:
            assert client.status("tiny")[0].state == "AVAILABLE"
            with pytest.raises(status.NotFound):
                client.status("tiny_copy")
            staged = tmp_path / "models.config.new"
            staged.write_text(_config({"tiny": tiny_repo / "tiny", "tiny_copy": tiny_repo / "tiny"}))
            os.replace(staged, config)
            deadline = time.monotonic() + 120
            while True:
                try:
                    if client.status("tiny_copy")[0].state == "AVAILABLE":
                        break
                except status.NotFound:
                    pass
                assert time.monotonic() < deadline, "the polled config never added tiny_copy"
                time.sleep(0.3)
        finally:
            client.close()
