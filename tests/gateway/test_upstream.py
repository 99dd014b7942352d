"""TF Serving's address is looked up again while the gateway runs (nginx's resolver, answers kept 5 s).

`server ... resolve` needs nginx >= 1.27.3, so nginx runs in the gateway's stand-in image (Debian
testing's 1.30; the pinned image is 1.28) on the host's network, rendered exactly as compose renders
it. Docker's embedded DNS (127.0.0.11) answers only inside a compose network (tests/e2e restarts
TF Serving there for real): here a small DNS server on a loopback UDP port stands in for it (A
records only, as nginx asks with ipv6=off), and the embedded server listens on 127.0.0.1. "TF
Serving came back on another address" is the name's answer changing from 127.0.0.3 (nothing
listens there) to 127.0.0.1, with nginx left running.
"""
from __future__ import annotations

import socket
import struct
import subprocess
import threading
import time
import uuid
from typing import Iterator

import grpc
import pytest
from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

from deploy.images.build import NGINX_IMAGE
from gateway import parse_nginx_version
from serving.stack.docker import image_present, probe_engine
from tests.support.gateway import MODEL, Gateway, compose_values, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.docker]  # waits out the resolver's 5 s cache and 3 s timeout

NOWHERE = "127.0.0.3"   # on loopback, where nothing listens: connections are refused
VALID_SECONDS = 5       # the template's `resolver ... valid=5s`


class StubDns:
    """Answers A queries from ``records`` (name -> IPv4); NXDOMAIN for other names; never answers ``silent``."""

    def __init__(self) -> None:
        self.records: dict[str, str] = {}
        self.silent: set[str] = set()
        self.queries: list[str] = []
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> "StubDns":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._sock.close()  # recvfrom raises: the thread ends
        self._thread.join(5)

    def _serve(self) -> None:
        while True:
            try:
                query, peer = self._sock.recvfrom(512)
            except OSError:
                return
            answer = self._answer(query)
            if answer:
                self._sock.sendto(answer, peer)

    def _answer(self, query: bytes) -> bytes | None:
        labels, at = [], 12
        while query[at]:
            labels.append(query[at + 1:at + 1 + query[at]].decode())
            at += 1 + query[at]
        question = query[12:at + 5]
        name = ".".join(labels).lower()
        self.queries.append(name)
        if name in self.silent:
            return None
        (qid,) = struct.unpack("!H", query[:2])
        address = self.records.get(name)
        if address is None:
            return struct.pack("!HHHHHH", qid, 0x8183, 1, 0, 0, 0) + question  # NXDOMAIN
        record = struct.pack("!HHHIH", 0xC00C, 1, 1, 1, 4) + socket.inet_aton(address)  # A, IN, TTL 1 s
        return struct.pack("!HHHHHH", qid, 0x8180, 1, 1, 0, 0) + question + record


@pytest.fixture
def dns() -> Iterator[StubDns]:
    with StubDns() as server:
        yield server


@pytest.fixture(scope="module")
def stand_in_nginx() -> tuple[list[str], tuple[int, int, int]]:
    """The stand-in image's nginx as a command on the host's network, and its version."""
    engine = probe_engine()
    if not engine.answers:
        pytest.skip(engine.reason)
    if not image_present(NGINX_IMAGE):
        pytest.skip(f"image {NGINX_IMAGE} is not built (make images)")
    version = subprocess.run(["docker", "run", "--rm", NGINX_IMAGE, "nginx", "-v"], capture_output=True, text=True)
    return (["docker", "run", "--rm", "-i", "--network", "host"], parse_nginx_version(version.stderr))


def _remove_labelled(label: str) -> None:
    """Remove what is left of this test's containers (a graceful stop normally removed them: --rm)."""
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={label}"], capture_output=True, text=True)
    if left.stdout.split():
        subprocess.run(["docker", "rm", "-f", *left.stdout.split()], capture_output=True)


def named_gateway(request, dns: StubDns, grpc_host: str, rest_host: str) -> Gateway:
    """A gateway of its own (the stand-in's nginx) whose upstreams are names that ``dns`` answers."""
    upstream = request.getfixturevalue("tf_serving")
    values = compose_values(
        request.getfixturevalue("compose_gateway_env"),
        GATEWAY_GRPC_UPSTREAM=f"{grpc_host}:{upstream.grpc_port}",
        GATEWAY_REST_UPSTREAM=f"{rest_host}:{upstream.rest_port}",
        GATEWAY_RESOLVER=f"127.0.0.1:{dns.port}")
    docker_run, version = request.getfixturevalue("stand_in_nginx")
    root, secrets = request.getfixturevalue("tmp_path"), request.getfixturevalue("gateway_secrets")
    label = f"tfs-stack-test-gateway={uuid.uuid4().hex}"  # a label, not a name: the `nginx -t` run shares it
    command = [*docker_run, "--label", label, "-v", f"{root}:{root}", "-v", f"{secrets.directory}:{secrets.directory}:ro",
               NGINX_IMAGE, "nginx"]
    manager = running_gateway(command, version, values, root, secrets, upstream)
    request.addfinalizer(lambda: _remove_labelled(label))
    request.addfinalizer(lambda: manager.__exit__(None, None, None))
    return manager.__enter__()


def grpc_status(gateway: Gateway) -> tuple[grpc.StatusCode, str]:
    """GetModelStatus through the gateway with the client key: the code, and the message if it failed."""
    with grpc.secure_channel(gateway.grpc_target, gateway.channel_credentials()) as channel:
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = MODEL
        try:
            model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
                request, metadata=[("x-api-key", gateway.key())], timeout=30)
        except grpc.RpcError as error:
            return error.code(), error.details()
        return grpc.StatusCode.OK, ""


def rest_status(gateway: Gateway) -> tuple[int, dict]:
    with gateway.http() as http:
        answer = http.get(f"{gateway.rest_url}/v1/models/{MODEL}", headers={"x-api-key": gateway.key()})
        return answer.status_code, answer.json()


def test_a_new_address_of_tf_serving_is_followed_without_restarting_the_gateway(request, dns):
    dns.records.update({"tfserving.test": NOWHERE})
    gateway = named_gateway(request, dns, "tfserving.test", "tfserving.test")
    assert grpc_status(gateway) == (grpc.StatusCode.UNAVAILABLE, "TF Serving is not reachable from the gateway")
    assert rest_status(gateway) == (503, {"error": "TF Serving is not reachable from the gateway"})

    dns.records["tfserving.test"] = "127.0.0.1"  # "the container came back on another address"
    changed = time.monotonic()
    while grpc_status(gateway)[0] != grpc.StatusCode.OK:
        assert time.monotonic() - changed < VALID_SECONDS + 5, "the gateway kept the old address"
        threading.Event().wait(0.2)
    assert rest_status(gateway)[0] == 200
    assert dns.queries.count("tfserving.test") >= 2
    entries = gateway.access_entries(until=lambda es: any(e["status"] == 200 for e in es))
    served = [e for e in entries if e["status"] == 200]
    assert served and served[-1]["upstream"].startswith("127.0.0.1:") and len(served[-1]["request_id"]) == 32
    refused = [e for e in entries if e["upstream_status"].startswith("502")]
    assert refused and refused[0]["upstream"].startswith(f"{NOWHERE}:")


def test_an_unknown_name_is_unavailable_at_once(request, dns):
    gateway = named_gateway(request, dns, "missing.test", "missing.test")
    started = time.monotonic()
    assert grpc_status(gateway) == (grpc.StatusCode.UNAVAILABLE, "TF Serving is not reachable from the gateway")
    assert rest_status(gateway) == (503, {"error": "TF Serving is not reachable from the gateway"})
    assert time.monotonic() - started < 5  # NXDOMAIN is an answer: nothing waits for a timeout
    assert "missing.test" in dns.queries
    assert "could not be resolved" in gateway.error_log.read_text()


def test_a_resolver_that_never_answers_is_unavailable_after_its_timeout_not_a_hang(request, dns):
    dns.silent.add("silent.test")
    gateway = named_gateway(request, dns, "silent.test", "silent.test")
    started = time.monotonic()
    assert grpc_status(gateway)[0] == grpc.StatusCode.UNAVAILABLE
    assert rest_status(gateway)[0] == 503
    assert time.monotonic() - started < 20  # resolver_timeout 3s each, not grpc_read_timeout's 600 s
    assert "silent.test" in dns.queries
