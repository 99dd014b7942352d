"""A server that cannot start says why once, exits 255 (``main.cc``'s -1), and prints no traceback."""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from serving import status
from serving.checkout import REPO_ROOT
from serving.server.flags import ServerFlags, validate_flags
from tests.support.models import export_tiny


@pytest.mark.parametrize("flag", ["port", "rest_api_port"])
@pytest.mark.parametrize("value", [70000, 65536, -1])
def test_a_port_out_of_range_is_refused_naming_the_flag(flag, value):
    with pytest.raises(status.InvalidArgument) as refused:
        validate_flags(ServerFlags(model_base_path="/models/m", **{flag: value}))
    assert f"--{flag}={value} is not a TCP port" in refused.value.details


def _serve(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "serving.server", *flags], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=180)


def test_port_70000_exits_255_before_loading_anything():
    result = _serve("--port=70000", "--model_base_path=/nonexistent")
    assert result.returncode == 255
    assert "--port=70000 is not a TCP port" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow   # loads a model before the port fails
def test_a_rest_port_in_use_is_one_error_and_exit_255_without_a_traceback(tmp_path):
    export_tiny(tmp_path / "m" / "1")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _serve("--port=0", f"--grpc_socket_path={tmp_path / 'grpc.sock'}", f"--rest_api_port={port}",
                        f"--model_base_path={tmp_path / 'm'}", f"--quarantine_dir={tmp_path / 'q'}")
    assert result.returncode == 255
    assert f"Failed to start HTTP Server at 127.0.0.1:{port}" in result.stderr
    assert "address already in use" in result.stderr and "(errno 98)" in result.stderr
    assert "Traceback" not in result.stderr and "Event loop is closed" not in result.stderr
