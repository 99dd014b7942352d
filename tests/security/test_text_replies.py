"""Every REST answer is ``{"error": ...}`` JSON, the ones aiohttp would write itself too, never Python's text.

A real ``RestFrontend`` on 127.0.0.1; its data plane's manager serves nothing
(only the HTTP layer is under test), and the metrics page of one test raises.
"""
from __future__ import annotations

import json
import socket
from typing import Iterator

import pytest

from serving.server.frontends.dataplane import DataPlane
from serving.server.frontends.rest import RestFrontend
from serving.launcher import free_port
from tests.support.security.misc_attacks import python_text

MONITORING_PATH = "/monitoring/prometheus/metrics"


class NoModels:
    """A model manager with no models: every name is not served."""

    def serves(self, name: str) -> bool:
        return False


class BrokenPage:
    def render(self) -> bytes:
        raise RuntimeError("a Python message that must stay in the log")


@pytest.fixture
def port() -> Iterator[int]:
    chosen = free_port()
    frontend = RestFrontend(DataPlane(NoModels()), port=chosen, host="127.0.0.1",  # type: ignore[arg-type]
                            monitoring_path=MONITORING_PATH, metrics=BrokenPage(), num_threads=1)
    frontend.start()
    yield chosen
    frontend.stop(grace=1)


def exchange(port: int, raw: bytes) -> tuple[int, bytes, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, body


def assert_json_error(head: bytes, body: bytes) -> str:
    assert b"content-type: application/json" in head.lower(), head
    message = json.loads(body)["error"]
    assert not python_text(message), message
    return message


@pytest.mark.parametrize("raw", [b"PO\xffST /v1/models/m:predict HTTP/1.1\r\nHost: x\r\n\r\n",
                                 b"GET /v1/models/m HTTP/1.1\r\nHost: x\r\nContent-Length: zz\r\n\r\n",
                                 b"GARBAGE\r\n\r\n"])
def test_a_message_aiohttp_cannot_parse_is_a_json_400(port, raw):
    code, head, body = exchange(port, raw)
    assert code == 400
    assert assert_json_error(head, body).startswith("Malformed HTTP request")


def test_an_exception_outside_the_v1_handlers_is_a_json_500_naming_only_a_request_id(port):
    code, head, body = exchange(port, f"GET {MONITORING_PATH} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                                .encode())
    assert code == 500
    message = assert_json_error(head, body)
    assert "request id" in message and "Python message" not in message


def test_a_lone_surrogate_in_a_signature_name_is_a_json_400(port):
    body = b'{"signature_name": "\\ud800", "instances": [[1.0]]}'
    code, head, reply = exchange(port, b"POST /v1/models/m:predict HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
    assert code == 400
    assert "The surrogate pair in string is invalid" in assert_json_error(head, reply)
