"""Slow clients: nginx closes a connection whose headers or body stop coming (the template's timeouts)."""
from __future__ import annotations

import re
import socket
import ssl
import threading
import time

import pytest

from tests.support.gateway import MODEL


def configured_seconds(gateway, directive: str) -> float:
    text = (gateway.conf_dir / "nginx.conf").read_text()
    return float(re.search(rf"^\s*{directive}\s+(\d+)s;", text, re.M).group(1))


def seconds_until_closed(gateway, first_bytes: bytes, limit: float) -> float:
    """Open TLS to the REST port, send ``first_bytes`` and nothing more; seconds until nginx closes."""
    context = ssl.create_default_context(cafile=str(gateway.secrets.ca_cert))
    raw = socket.create_connection(("127.0.0.1", gateway.ports["rest"]), timeout=limit)
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
        conn.sendall(first_bytes)
        started = time.monotonic()
        try:
            while conn.recv(4096):
                pass
        except (socket.timeout, TimeoutError):
            return float("inf")
        except (ConnectionResetError, ssl.SSLError):
            pass
        return time.monotonic() - started


@pytest.mark.slow
def test_partial_headers_and_a_stalled_body_are_cut_off_at_the_configured_timeouts(gateway):
    header_timeout = configured_seconds(gateway, "client_header_timeout")
    body_timeout = configured_seconds(gateway, "client_body_timeout")
    partial_headers = f"GET /v1/models/{MODEL} HTTP/1.1\r\nHost: gateway\r\nx-api".encode()
    stalled_body = (f"POST /v1/models/{MODEL}:predict HTTP/1.1\r\nHost: gateway\r\nx-api-key: {gateway.key()}\r\n"
                    "content-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"inputs\":").encode()
    results: dict[str, float] = {}

    def measure(name: str, first_bytes: bytes, limit: float) -> None:
        results[name] = seconds_until_closed(gateway, first_bytes, limit)

    threads = [threading.Thread(target=measure, args=("headers", partial_headers, header_timeout + 10)),
               threading.Thread(target=measure, args=("body", stalled_body, body_timeout + 10))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert header_timeout - 1 <= results["headers"] <= header_timeout + 5, results
    assert body_timeout - 1 <= results["body"] <= body_timeout + 5, results
