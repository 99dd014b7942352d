"""Attacks on the embedded server's REST port, each bounded in count and time, sent only to 127.0.0.1.

Every case takes a running ``ServerProcess`` and returns an ``Outcome``: how
many attack requests (or connections) were sent, how each ended (2xx, 4xx,
5xx, closed by the server, or a hang: neither answered nor closed within the
case's bound), whether the server still runs, and what a ``Probe`` saw
meanwhile: a good REST and a good gRPC Predict every 100 ms, each of which
must be answered within 1 s, and the server's peak RSS (``VmRSS``).

``tests/security/test_rest_attacks.py`` asserts on the outcomes. Run as a
script, this module prints the attack table for whatever ``serving`` package
is first on ``PYTHONPATH`` (so the same cases measure the code before a change
and after it)::

    PYTHONPATH=$PWD .venv/bin/python tests/support/security/rest_attacks.py
"""
from __future__ import annotations

import json
import selectors
import socket
import tempfile
import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import grpc
import httpx
import numpy as np

from serving import codec
from serving.launcher import ServerProcess

__all__ = [
    "Outcome", "Probe", "ATTACK_FLAGS", "MAX_CONNECTIONS", "READ_TIMEOUT_S", "MAX_CONCURRENT", "NOFILE_LIMIT",
    "GOOD_WITHIN_S", "start_server", "gzip_bomb", "rss_kib", "table", "await_endings", "quick_refusals", "run_all",
    "case_gzip_bomb", "case_partial_headers", "case_partial_body", "case_content_length_too_large",
    "case_idle_connections", "case_idle_keep_alive", "case_header_flood", "case_connection_flood",
    "case_body_over_limit",
    "case_big_integers", "case_utf8_echo", "case_concurrency_flood",
]

READ_TIMEOUT_S = 2
MAX_CONNECTIONS = 64
MAX_CONCURRENT = 8
NOFILE_LIMIT = 1024  # the server's RLIMIT_NOFILE, so that a bounded flood can reach it
# The tiny model's "sleep" signature busy-waits on one of TensorFlow's inter-op threads; 32 of them keep held
# requests from taking every thread, so that good requests measure the front-ends, not a saturated model.
ATTACK_FLAGS = (f"--rest_api_read_timeout_seconds={READ_TIMEOUT_S}", f"--rest_api_max_connections={MAX_CONNECTIONS}",
                f"--rest_api_max_concurrent_requests={MAX_CONCURRENT}", "--rest_api_timeout_in_ms=20000",
                "--tensorflow_inter_op_parallelism=32")
GOOD_JSON = {"instances": [[1.0, 2.0, 3.0]]}
GOOD_ANSWER = {"predictions": [{"y": [2.0, 4.0, 6.0], "total": 12.0}]}
GOOD_WITHIN_S = 1.0
PREDICT_PATH = "/v1/models/tiny:predict"


@dataclass
class Outcome:
    """What one attack case did to the server."""

    case: str
    sent: int = 0
    endings: Counter = field(default_factory=Counter)  # "2xx" | "4xx" | "5xx" | "closed" | "hang" | "held open"
    slowest_ending_s: float = 0.0
    crashed: bool = False
    good_sent: int = 0
    good_failed: list[str] = field(default_factory=list)
    slowest_good_s: float = 0.0
    rss_growth_mib: float = 0.0

    def row(self) -> str:
        e = self.endings
        return (f"| {self.case} | {self.sent} | {e['2xx']} | {e['4xx']} | {e['5xx']} | {e['closed']} | "
                f"{int(self.crashed)} | {e['hang']} | {e['held open']} | {len(self.good_failed)}/{self.good_sent} | "
                f"{self.slowest_good_s:.2f} | {self.rss_growth_mib:.0f} |")


def table(outcomes: Sequence[Outcome]) -> str:
    head = ("| case | sent | 2xx | 4xx | 5xx | closed by server | crashes | hangs | held open (flood) "
            "| failed good (REST+gRPC) | slowest good s | RSS growth MiB |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|")
    return "\n".join([head, *(o.row() for o in outcomes)])


def rss_kib(pid: int) -> int:
    """The process's resident set (``VmRSS`` in /proc/<pid>/status), 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Probe:
    """Good requests during an attack: REST on a new connection and gRPC, every 100 ms; peak RSS."""

    def __init__(self, server: ServerProcess, *, rest: bool = True) -> None:
        self._server, self._rest = server, rest
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="probe", daemon=True)
        self._request = codec.encode_predict_request("tiny", {"x": np.array([[1.0, 2.0, 3.0]], np.float32)})
        self.sent, self.failed, self.slowest = 0, [], 0.0
        self.rss_base = self.rss_peak = rss_kib(server.pid)

    def __enter__(self) -> "Probe":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while True:  # at least one round, however short the attack
            if self._rest:
                self.timed("REST", self.rest_once)
            self.timed("gRPC", self.grpc_once)
            self.rss_peak = max(self.rss_peak, rss_kib(self._server.pid))
            if self._stop.wait(0.1):
                return

    def grpc_once(self) -> None:
        with grpc.insecure_channel(self._server.grpc_target) as channel:
            channel.unary_unary("/tensorflow.serving.PredictionService/Predict")(
                self._request, timeout=GOOD_WITHIN_S * 5)

    def rest_once(self) -> None:
        response = httpx.post(self._server.rest_url + PREDICT_PATH, json=GOOD_JSON, timeout=GOOD_WITHIN_S * 5)
        if response.status_code != 200 or response.json() != GOOD_ANSWER:
            raise RuntimeError(f"{response.status_code} {response.text[:100]}")

    def timed(self, what: str, call: Callable[[], object]) -> None:
        self.sent += 1
        start = time.monotonic()
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - every failure is a finding
            self.failed.append(f"{what}: {type(exc).__name__}: {str(exc)[:120]}")
            return
        took = time.monotonic() - start
        self.slowest = max(self.slowest, took)
        if took > GOOD_WITHIN_S:
            self.failed.append(f"{what}: answered after {took:.2f} s")


# -- raw HTTP/1.1 on sockets ------------------------------------------------------------------
def _connect(server: ServerProcess, timeout: float = 5.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.rest_port), timeout=timeout)
    sock.setblocking(False)
    return sock


def _send_all(sock: socket.socket, data: bytes, timeout: float = 10.0) -> bool:
    """Send ``data``; False once the server has closed the connection."""
    sock.settimeout(timeout)
    try:
        sock.sendall(data)
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(False)


def _ending(data: bytes) -> str:
    if data.startswith(b"HTTP/1."):
        code = int(data.split(b" ", 2)[1])
        return f"{code // 100}xx"
    return "closed"


def await_endings(socks: Sequence[socket.socket], bound_s: float) -> tuple[Counter, float]:
    """How each socket ended within ``bound_s``: its response's class, closed, or hang; and the slowest."""
    selector = selectors.DefaultSelector()
    buffers = {}
    for sock in socks:
        selector.register(sock, selectors.EVENT_READ)
        buffers[sock] = b""
    endings: Counter = Counter()
    start = time.monotonic()
    slowest = 0.0
    while buffers and (left := bound_s - (time.monotonic() - start)) > 0:
        for key, _ in selector.select(min(left, 0.2)):
            sock = key.fileobj
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                buffers[sock] += data
                if b"\r\n" not in buffers[sock]:
                    continue
            endings[_ending(buffers.pop(sock))] += 1
            slowest = max(slowest, time.monotonic() - start)
            selector.unregister(sock)
    if buffers:
        endings["hang"] += len(buffers)
    selector.close()
    return endings, slowest


def _request_head(path: str, extra: str = "", method: str = "POST") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}".encode()


def _close_all(socks: Sequence[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def gzip_bomb(inflated_bytes: int = 1 << 30) -> bytes:
    """gzip of ``inflated_bytes`` spaces (1 GiB by default inflates from about 1 MiB)."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b" " * (1 << 20)
    parts = [deflater.compress(block) for _ in range(inflated_bytes // len(block))]
    return b"".join(parts) + deflater.flush()


# -- the cases ---------------------------------------------------------------------------------
def _run_case(server: ServerProcess, case: str, attack: Callable[[Outcome], None], *,
              rest_probe: bool = True) -> Outcome:
    outcome = Outcome(case)
    with Probe(server, rest=rest_probe) as probe:
        attack(outcome)
    return _observed(outcome, probe, server)


def _observed(outcome: Outcome, probe: Probe, server: ServerProcess) -> Outcome:
    outcome.crashed = not server.running()
    outcome.good_sent, outcome.good_failed, outcome.slowest_good_s = probe.sent, probe.failed, probe.slowest
    outcome.rss_growth_mib = max(0, probe.rss_peak - probe.rss_base) / 1024
    return outcome


def _posted(server: ServerProcess, outcome: Outcome, body: bytes, *, headers: str = "", count: int = 1,
            path: str = PREDICT_PATH, bound_s: float = 30.0) -> None:
    for _ in range(count):
        sock = _connect(server)
        outcome.sent += 1
        head = _request_head(path, f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{headers}\r\n")
        _send_all(sock, head + body)
        endings, slowest = await_endings([sock], bound_s)
        outcome.endings.update(endings)
        outcome.slowest_ending_s = max(outcome.slowest_ending_s, slowest)
        sock.close()


def case_gzip_bomb(server: ServerProcess, bomb: bytes, count: int = 3) -> Outcome:
    """Bodies of about 1 MiB that inflate to 1 GiB (``Content-Encoding: gzip``)."""
    return _run_case(server, "gzip bomb (1 MiB -> 1 GiB)",
                     lambda o: _posted(server, o, bomb, headers="Content-Encoding: gzip\r\n", count=count))


def _held(server: ServerProcess, case: str, payload: bytes, count: int, bound_s: float,
          prime: Optional[bytes] = None) -> Outcome:
    """``count`` connections that each send ``payload`` (after a whole request ``prime``) and then nothing."""
    def attack(outcome: Outcome) -> None:
        socks = []
        try:
            for _ in range(count):
                sock = _connect(server)
                socks.append(sock)
                if prime is not None:
                    _send_all(sock, prime)
                    _read_one_response(sock)
                if payload:
                    _send_all(sock, payload)
            outcome.sent = count
            outcome.endings, outcome.slowest_ending_s = await_endings(socks, bound_s)
        finally:
            _close_all(socks)

    return _run_case(server, case, attack)


def _read_one_response(sock: socket.socket, bound_s: float = 10.0) -> None:
    """Read one whole small response (a keep-alive request's answer) and leave the connection open."""
    deadline = time.monotonic() + bound_s
    data = b""
    sock.settimeout(bound_s)
    while time.monotonic() < deadline:
        data += sock.recv(65536)
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            if len(body) >= length:
                break
    sock.setblocking(False)


def case_partial_headers(server: ServerProcess, count: int = 20, bound_s: float = 15.0) -> Outcome:
    head = _request_head(PREDICT_PATH, "Content-Type: application/json\r\n")  # no blank line: headers never end
    return _held(server, "partial headers", head, count, bound_s)


def case_partial_body(server: ServerProcess, count: int = 20, bound_s: float = 15.0) -> Outcome:
    head = _request_head(PREDICT_PATH, "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    return _held(server, "partial body", head + b'{"instances": ', count, bound_s)


def case_content_length_too_large(server: ServerProcess, count: int = 20, bound_s: float = 15.0) -> Outcome:
    body = json.dumps(GOOD_JSON).encode()
    head = _request_head(PREDICT_PATH, f"Content-Type: application/json\r\nContent-Length: {len(body) + 100}\r\n\r\n")
    return _held(server, "Content-Length > body", head + body, count, bound_s)


def case_idle_connections(server: ServerProcess, count: int = 20, bound_s: float = 15.0) -> Outcome:
    return _held(server, "idle connections (nothing sent)", b"", count, bound_s)


def case_idle_keep_alive(server: ServerProcess, count: int = 20, bound_s: float = 15.0) -> Outcome:
    status_request = _request_head("/v1/models/tiny", "\r\n", method="GET")
    return _held(server, "idle keep-alive after a request", b"", count, bound_s, prime=status_request)


def case_header_flood(server: ServerProcess, count: int = 5, headers: int = 2000, bound_s: float = 30.0) -> Outcome:
    """``count`` requests with ``headers`` header lines of 8,000 bytes each (16 MB of headers by default)."""
    def attack(outcome: Outcome) -> None:
        line = b"X-Filler-%d: " + b"v" * 8000 + b"\r\n"
        for _ in range(count):
            sock = _connect(server)
            outcome.sent += 1
            _send_all(sock, _request_head("/v1/models/tiny", method="GET")
                      + b"".join(line % i for i in range(headers)) + b"\r\n")
            endings, slowest = await_endings([sock], bound_s)  # a 431, or a reset while still sending
            outcome.endings.update(endings)
            outcome.slowest_ending_s = max(outcome.slowest_ending_s, slowest)
            sock.close()

    return _run_case(server, f"header flood ({headers} x 8 kB headers)", attack)


def case_connection_flood(server: ServerProcess, count: int, hold_s: float = READ_TIMEOUT_S * 0.75) -> Outcome:
    """``count`` idle connections opened at once, then held ``hold_s`` s while the probe sends good requests.

    Connections the server still holds at the end count as "held open" (at most its connection cap), not as
    hangs; connections it never accepted (its descriptors ran out) count as hangs, and after ten of them in a
    row the rest are not tried.
    """
    outcome = Outcome(f"connection flood ({count} idle)", sent=count)
    probe = Probe(server)
    socks: list[socket.socket] = []
    refused_in_a_row = 0
    try:
        for _ in range(count):
            if refused_in_a_row == 10:
                outcome.endings["hang"] += 1
                continue
            try:
                socks.append(_connect(server, timeout=3.0))
                refused_in_a_row = 0
            except OSError:
                outcome.endings["hang"] += 1
                refused_in_a_row += 1
        with probe:
            endings, outcome.slowest_ending_s = await_endings(socks, hold_s)
    finally:
        _close_all(socks)
    held = endings.pop("hang", 0)
    if held:
        endings["held open"] = held
    outcome.endings.update(endings)
    return _observed(outcome, probe, server)


def case_body_over_limit(server: ServerProcess, count: int = 5, bound_s: float = 15.0) -> Outcome:
    head = _request_head(PREDICT_PATH, "Content-Type: application/json\r\nContent-Length: 300000000\r\n\r\n")
    return _held(server, "declared body of 300 MB", head + b'{"instances": [', count, bound_s)


def case_big_integers(server: ServerProcess) -> Outcome:
    def attack(outcome: Outcome) -> None:
        for body in (b'{"instances": [' + b"7" * 5000 + b"]}", b'{"instances": [[NaN, 1, ' + b"7" * 5000 + b"]]}"):
            _posted(server, outcome, body)
        for path in ("/v1/models/tiny/versions/" + "9" * 5000, "/v1/models/tiny/versions/" + "9" * 5000 + ":predict"):
            method = "POST" if path.endswith(":predict") else "GET"
            sock = _connect(server)
            outcome.sent += 1
            body = json.dumps(GOOD_JSON).encode() if method == "POST" else b""
            _send_all(sock, _request_head(path, f"Content-Length: {len(body)}\r\n\r\n", method=method) + body)
            endings, _ = await_endings([sock], 30)
            outcome.endings.update(endings)
            sock.close()

    return _run_case(server, "integers of 5000 digits (body, /versions/N)", attack)


def case_utf8_echo(server: ServerProcess, count: int = 5) -> Outcome:
    body = json.dumps(["a" + "é" * 150], ensure_ascii=False).encode()
    return _run_case(server, 'non-object JSON ["a"+"é"*150]', lambda o: _posted(server, o, body, count=count))


def case_concurrency_flood(server: ServerProcess, count: int = 4 * MAX_CONCURRENT, hold_s: float = 3.0) -> Outcome:
    """``count`` requests at once that each hold a worker ``hold_s`` s (the tiny model's ``sleep`` signature)."""
    body = json.dumps({"signature_name": "sleep", "instances": [hold_s]}).encode()

    def attack(outcome: Outcome) -> None:
        socks = []
        for _ in range(count):
            sock = _connect(server)
            head = _request_head(PREDICT_PATH, f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
            _send_all(sock, head + body)
            socks.append(sock)
        outcome.sent = count
        outcome.endings, outcome.slowest_ending_s = await_endings(socks, count * hold_s + 30)
        _close_all(socks)

    return _run_case(server, f"{count} concurrent slow requests", attack, rest_probe=False)


def quick_refusals(server: ServerProcess, count: int = 4 * MAX_CONCURRENT, hold_s: float = 4.0) -> list[float]:
    """Seconds each request took to be refused with 429 while ``MAX_CONCURRENT`` slow ones hold every slot."""
    body = {"signature_name": "sleep", "instances": [hold_s]}

    def hold() -> None:
        while httpx.post(server.rest_url + PREDICT_PATH, json=body, timeout=60).status_code == 429:
            pass  # refused because the poll below took the last slot for a moment: ask again

    holders = [threading.Thread(target=hold) for _ in range(MAX_CONCURRENT)]
    for thread in holders:
        thread.start()
    refused: list[float] = []
    with httpx.Client(base_url=server.rest_url, timeout=30) as client:
        deadline = time.monotonic() + hold_s + 10
        while client.post(PREDICT_PATH, json=GOOD_JSON).status_code != 429:  # until the server shows every slot held
            assert time.monotonic() < deadline, "the slow requests never held every slot"
        for _ in range(count):
            start = time.monotonic()
            if client.post(PREDICT_PATH, json=GOOD_JSON).status_code == 429:
                refused.append(time.monotonic() - start)
    for thread in holders:
        thread.join(60)
    return refused


def start_server(repo: Path, *extra: str, nofile: int = 0, workdir: Optional[Path] = None) -> ServerProcess:
    """The embedded server serving ``tiny`` from ``repo`` with the attack flags, RLIMIT_NOFILE ``nofile``."""
    server = ServerProcess(["--model_name=tiny", f"--model_base_path={repo / 'tiny'}", *ATTACK_FLAGS, *extra],
                           wait_for=["tiny"], log_path=(workdir / "server.log") if workdir else None)
    server.launch()
    if nofile:
        import resource  # only here: lowers the child's descriptor limit so that a bounded flood reaches it

        resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (nofile, nofile))
    try:
        server.wait_ready()
        warm_up = Probe(server)  # the first requests of each kind load code and grow RSS: not the attacks' doing
        for _ in range(3):
            warm_up.timed("REST", warm_up.rest_once)
            warm_up.timed("gRPC", warm_up.grpc_once)
        assert not warm_up.failed, warm_up.failed
    except BaseException:
        server.stop()
        raise
    return server


def run_all(repo: Path, workdir: Path) -> list[Outcome]:
    """Every case against one server (the flood last, on a server with a low descriptor limit)."""
    outcomes = []
    bomb = gzip_bomb()
    server = start_server(repo, workdir=workdir)
    try:
        outcomes += [case_gzip_bomb(server, bomb), case_partial_headers(server), case_partial_body(server),
                     case_content_length_too_large(server), case_idle_connections(server),
                     case_idle_keep_alive(server), case_header_flood(server), case_body_over_limit(server),
                     case_big_integers(server),
                     case_utf8_echo(server), case_concurrency_flood(server)]
    finally:
        server.stop()
    server = start_server(repo, nofile=NOFILE_LIMIT, workdir=workdir)
    try:
        outcomes.append(case_connection_flood(server, NOFILE_LIMIT + 50))
    finally:
        server.stop()
    return outcomes


def _main() -> None:
    from tests.support.models import export_tiny  # TensorFlow: only to export the model

    with tempfile.TemporaryDirectory(prefix="rest-attacks-") as tmp:
        repo = Path(tmp)
        export_tiny(repo / "tiny" / "1")
        started = time.monotonic()
        outcomes = run_all(repo, repo)
        print(table(outcomes))
        print(f"\n{time.monotonic() - started:.0f} s")
        for outcome in outcomes:
            for failure in outcome.good_failed[:3]:
                print(f"{outcome.case}: {failure}")


if __name__ == "__main__":
    _main()
