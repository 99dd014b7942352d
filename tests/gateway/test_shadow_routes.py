"""The gateway's shadow (``canary --shadow``): a copy of each unlabeled POST goes to the canary label, the
client gets stable's answer, and a canary that stalls or fails costs the client nothing past the copy's
bounded timeouts.

Debian's nginx runs the repository's templates (compose's values) in front of a stand-in for TF Serving's
REST port (a thread of this process, real sockets), because these checks need what the embedded server
cannot do on cue: hold the canary's answers for as long as the test says, and count which label each
request reached. The shadow routes are written by ``serving.rollout.traffic.HostNginx``, as
``python -m serving.rollout canary --shadow --gateway nginx`` writes them. tests/rollout/test_shadow.py
runs the same routes in front of the embedded server with real models.
"""
from __future__ import annotations

import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from gateway.canary import MIRROR_FILE, route_file_names
from serving.config.config_lock import StaleConfig
from serving.rollout.traffic import HostNginx
from serving.launcher import free_port
from tests.support.gateway import Gateway, compose_values, running_gateway
from tests.support.stub_upstream import send_json

pytestmark = pytest.mark.slow
MODEL, OTHER = "digits", "text"
PREDICT = f"/v1/models/{MODEL}:predict"
BODY = {"instances": [[1.0]]}
# routes.conf.template's proxy_read_timeout for the copy: the most a stalled canary may add to the next request
# on the same keep-alive connection.
SHADOW_READ_TIMEOUT = 2.0


class LabelledUpstream:
    """TF Serving's REST port as far as the gateway sees it: ``/v1/models/M[/labels/L]:predict`` answers
    ``{"predictions": [...], "label": L}`` (``""`` unlabeled). Counts the requests per (model, label, shadow
    header); ``canary`` is ``ok``, ``fail`` (500) or ``stall`` (held until ``release`` is set)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.canary = "ok"
        self.release = threading.Event()
        self.counts: Counter = Counter()
        self.lock = threading.Lock()
        self.stalled = threading.Semaphore(0)
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body in two writes: no 40 ms delayed-ACK wait

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self._send(200, {"model_version_status": []})

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers.get("content-length", 0)))
                match = re.fullmatch(r"/v1/models/([^/:]+)(?:/labels/([^/:]+))?:(\w+)", self.path)
                if match is None:
                    self._send(404, {"error": "no such path"})
                    return
                model, label, _ = match.groups()
                label = label or ""
                with upstream.lock:
                    upstream.counts[(model, label, self.headers.get("x-gateway-shadow", ""))] += 1
                if label == "canary" and upstream.canary == "stall":
                    upstream.stalled.release()
                    upstream.release.wait(120)
                if label == "canary" and upstream.canary == "fail":
                    self._send(500, {"error": "the canary fails"})
                    return
                self._send(200, {"predictions": [[0.5]], "label": label})

            def _send(self, status: int, body: dict) -> None:
                send_json(self, status, body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self, model: str = MODEL, label: str = "", shadow: str = "") -> int:
        with self.lock:
            return self.counts[(model, label, shadow)]

    def reset(self) -> None:
        with self.lock:
            self.counts.clear()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


class _Upstream:
    """What running_gateway keeps of its upstream (a ServerProcess there; nothing here reads it)."""


@pytest.fixture(scope="module")
def stack(nginx, nginx_version, gateway_secrets, compose_gateway_env, tmp_path_factory
          ) -> Iterator[tuple[Gateway, HostNginx, LabelledUpstream]]:
    upstream = LabelledUpstream()
    grpc_port = free_port()  # nothing listens: these tests send REST only
    values = {**compose_values(compose_gateway_env, GATEWAY_GRPC_UPSTREAM=f"127.0.0.1:{grpc_port}",
                               GATEWAY_REST_UPSTREAM=f"127.0.0.1:{upstream.port}", GATEWAY_RESOLVER="127.0.0.1"),
              "GATEWAY_RATE": "100000r/s"}
    try:
        with running_gateway(nginx, nginx_version, values, tmp_path_factory.mktemp("shadow-gateway"),
                             gateway_secrets, _Upstream()) as gateway:  # type: ignore[arg-type]
            yield gateway, HostNginx(gateway.conf_dir / "nginx.conf", nginx=nginx), upstream
    finally:
        upstream.close()


@pytest.fixture
def shadow(stack):
    gateway, routes, upstream = stack
    upstream.canary, upstream.release = "ok", threading.Event()
    upstream.reset()
    yield gateway, routes, upstream
    upstream.release.set()
    routes.clear(MODEL)


def post_all(gateway: Gateway, path: str, count: int) -> tuple[Counter, float]:
    """``count`` POSTs of ``path`` on one keep-alive connection: (answers by status and label, slowest s)."""
    answers: Counter = Counter()
    slowest = 0.0
    with gateway.http() as http:
        for _ in range(count):
            start = time.monotonic()
            response = http.post(gateway.rest_url + path, json=BODY, headers={"x-api-key": gateway.key()})
            slowest = max(slowest, time.monotonic() - start)
            answers[(response.status_code, response.json().get("label"))] += 1
    return answers, slowest


def wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        threading.Event().wait(0.02)
    return True


def test_a_full_shadow_copies_every_unlabeled_post_to_canary_and_answers_from_stable(shadow):
    gateway, routes, upstream = shadow
    routes.set_weight(MODEL, 0, shadow=100)
    answers, _ = post_all(gateway, PREDICT, 50)
    assert answers == {(200, "stable"): 50}  # the client only ever gets stable's answer
    assert wait_for(lambda: upstream.count(label="canary", shadow="1") == 50), upstream.counts
    assert upstream.count(label="stable") == 50
    # Only the shadow's copies reached canary; a label or version named by the client is no copy's business.
    answers, _ = post_all(gateway, f"/v1/models/{MODEL}/labels/canary:predict", 5)
    assert answers == {(200, "canary"): 5}
    assert upstream.count(label="canary", shadow="1") == 50
    # Metadata (GET) and other models are not copied.
    with gateway.http() as http:
        http.get(gateway.rest_url + f"/v1/models/{MODEL}/metadata", headers={"x-api-key": gateway.key()})
    post_all(gateway, f"/v1/models/{OTHER}:predict", 5)
    assert upstream.count(OTHER, "") == 5 and upstream.count(OTHER, "canary", "1") == 0


def test_a_partial_shadow_copies_about_its_share(shadow):
    gateway, routes, upstream = shadow
    routes.set_weight(MODEL, 0, shadow=25)
    answers, _ = post_all(gateway, PREDICT, 400)
    assert answers == {(200, "stable"): 400}
    copies = upstream.count(label="canary", shadow="1")
    assert wait_for(lambda: upstream.count(label="canary", shadow="1") >= 60)
    # 25 % of 400 = 100; split_clients on $request_id (random): 4 sigma is about +-35.
    assert 60 <= upstream.count(label="canary", shadow="1") <= 140, copies


def test_ending_the_shadow_stops_the_copies(shadow):
    gateway, routes, upstream = shadow
    routes.set_weight(MODEL, 0, shadow=100)
    post_all(gateway, PREDICT, 5)
    assert wait_for(lambda: upstream.count(label="canary", shadow="1") == 5)
    # A second model in shadow keeps the mirror on when the first one's shadow ends; the last one turns it off.
    routes.set_weight(OTHER, 0, shadow=100)
    routes.set_weight(MODEL, 0)  # what canary without --shadow (and auto's first weight step) writes
    assert not (gateway.conf_dir / route_file_names(MODEL)[2]).exists()
    assert (gateway.conf_dir / MIRROR_FILE).exists()
    post_all(gateway, f"/v1/models/{OTHER}:predict", 5)
    assert wait_for(lambda: upstream.count(OTHER, "canary", "1") == 5)
    routes.clear(OTHER)
    assert not (gateway.conf_dir / MIRROR_FILE).exists()  # no shadow: no request pays for a copy
    answers, _ = post_all(gateway, PREDICT, 20)
    assert answers == {(200, "stable"): 20}
    routes.clear(MODEL)  # what rollback and promote write
    post_all(gateway, PREDICT, 5)
    assert upstream.count(label="canary", shadow="1") == 5


def test_a_failing_canary_fails_no_client(shadow):
    gateway, routes, upstream = shadow
    upstream.canary = "fail"
    routes.set_weight(MODEL, 0, shadow=100)
    answers, _ = post_all(gateway, PREDICT, 50)
    assert answers == {(200, "stable"): 50}
    assert wait_for(lambda: upstream.count(label="canary", shadow="1") == 50)


def test_a_stalled_canary_delays_no_client_past_the_copys_timeout(shadow):
    gateway, routes, upstream = shadow
    upstream.canary = "stall"
    routes.set_weight(MODEL, 0, shadow=100)
    requests = 12
    answers, slowest = post_all(gateway, PREDICT, requests)
    assert answers == {(200, "stable"): requests}
    # On one keep-alive connection nginx reads the next request once the copy of the last one ended: the copy's
    # read timeout bounds that wait (at most 4 copies are held at once: tfs_shadow's max_conns; past that a
    # copy is dropped at once). Generous margin: a bound, not a speed target.
    assert slowest < SHADOW_READ_TIMEOUT + 3.0, slowest
    # The copy that timed out stopped the copies (tfs_shadow's max_fails): at most max_conns (4) reached the
    # stalled canary, however many requests came.
    assert 1 <= upstream.count(label="canary", shadow="1") <= 4, upstream.counts
    # Concurrent clients on their own connections are not held by the stalled copies at all.
    results: list = []

    def one() -> None:
        with gateway.http() as http:
            start = time.monotonic()
            response = http.post(gateway.rest_url + PREDICT, json=BODY, headers={"x-api-key": gateway.key()})
            results.append((response.status_code, response.json().get("label"), time.monotonic() - start))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted((s, label) for s, label, _ in results) == [(200, "stable")] * 8
    assert max(t for _, _, t in results) < SHADOW_READ_TIMEOUT, results


@pytest.mark.parametrize("first, second", [("shadow", "clear"), ("shadow", "weight"), ("clear", "shadow")])
def test_two_operators_changing_the_routes_at_once_one_wins_whole_the_other_is_refused(stack, first, second):
    """Both read the model's routes, then both write (released together by a barrier): the lock lets one
    write and reload at a time, and the compare-and-swap refuses the second (its read is stale), so neither
    change is lost unseen and the files and the running nginx are the winner's, whole."""
    gateway, routes, upstream = stack
    routes.set_weight(MODEL, 0, shadow=50)  # some routes to start from
    writes = {"shadow": lambda expected: routes.set_weight(MODEL, 0, shadow=100, expected=expected),
              "weight": lambda expected: routes.set_weight(MODEL, 10, expected=expected),
              "clear": lambda expected: routes.clear(MODEL, expected=expected)}
    barrier = threading.Barrier(2)
    outcome: dict[str, str] = {}

    def operator(name: str) -> None:
        expected = routes.state(MODEL)
        barrier.wait()
        try:
            writes[name](expected)
            outcome[name] = "written"
        except StaleConfig:
            outcome[name] = "refused"

    threads = [threading.Thread(target=operator, args=(name,)) for name in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(outcome.values()) == ["refused", "written"], outcome
    winner = next(name for name, result in outcome.items() if result == "written")
    conf, label_map, shadow_map = (gateway.conf_dir / name for name in route_file_names(MODEL))
    expected_files = {"shadow": {conf, label_map, shadow_map}, "weight": {conf, label_map}, "clear": set()}[winner]
    assert {p for p in (conf, label_map, shadow_map) if p.exists()} == expected_files
    if winner != "clear":
        header = label_map.read_text().splitlines()[0]
        assert all(p.read_text().splitlines()[0] == header for p in expected_files)  # one writer's files
    # The running nginx serves the winner's routes.
    upstream.reset()
    answers, _ = post_all(gateway, PREDICT, 40)
    copies = upstream.count(label="canary", shadow="1")
    if winner == "shadow":
        assert answers == {(200, "stable"): 40} and wait_for(lambda: upstream.count(label="canary", shadow="1") == 40)
    elif winner == "weight":
        assert set(answers) <= {(200, "stable"), (200, "canary")} and copies == 0
    else:
        assert answers == {(200, ""): 40} and copies == 0  # no routes: unlabeled requests pass unchanged
    routes.clear(MODEL)
