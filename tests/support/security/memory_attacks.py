"""Memory attacks on the embedded server (requests that cost far more than they weigh), and their table.

Each case runs against a freshly started server serving the zoo's digits,
text and ranker models, while a probe sends a good digits Predict over gRPC
every 100 ms (5 s deadline; an answer slower than ``GOOD_WITHIN_S`` counts as
failed). A row says: requests sent, 4xx / 5xx answers (gRPC codes mapped
through ``serving.status``), whether the server died, hangs (no answer within
the case's bound), failed good requests, the server's peak RSS over the whole
attack (``VmHWM`` reset just before it) and the RSS it still held
``SETTLE_S`` seconds after (both above its RSS before), and whether any
reply carried Python text.

Run as a script it prints the table for whatever ``serving`` is first on
``PYTHONPATH``, so the same cases measure the code before a change and after::

    PYTHONPATH=$PWD .venv/bin/python tests/support/security/memory_attacks.py --model-repo DIR [--case NAME ...]

``DIR`` holds digits, text and ranker (the tests' cached export,
``.cache/test-models/<hash>``). ``tests/security/test_memory_*.py`` assert on
the same cases.
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import re
import socket
import tempfile
import threading
import time
from collections import Counter
from concurrent import futures
from pathlib import Path
from typing import Callable, Optional, Sequence

import grpc
import httpx
import numpy as np
from tensorflow_serving.apis import classification_pb2, predict_pb2, prediction_service_pb2_grpc, regression_pb2

from serving import codec
from serving.launcher import ServerProcess
from tests.support.security.attacks import _kind as _grpc_kind   # ok | hang | 4xx | 5xx, as the gRPC attack table counts

__all__ = ["CASES", "MODELS", "Row", "Probe", "start", "run_case", "table", "main"]

MODELS = ("digits", "text", "ranker")
GOOD_WITHIN_S = 1.0
SETTLE_S = 5.0
Stub = prediction_service_pb2_grpc.PredictionServiceStub
_PYTHON_TEXT = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception)\b|Traceback|File \"")


@dataclasses.dataclass
class Row:
    case: str
    sent: int = 0
    endings: Counter = dataclasses.field(default_factory=Counter)   # ok | 4xx | 5xx | hang | closed
    crashed: bool = False
    good_sent: int = 0
    good_failed: int = 0
    good_errors: int = 0   # of which errors (past the 5 s deadline, or any code but OK)
    peak_mb: float = 0.0
    retained_mb: float = 0.0
    python_text: int = 0
    details: set = dataclasses.field(default_factory=set)
    probe: Optional["Probe"] = None
    model_runs: Optional[int] = None   # Predict runs of the attack that reached the model (where counted)
    cpu_s: Optional[float] = None      # server CPU seconds spent after the attack's answers (where counted)

    def end(self, kind: str, detail: str = "") -> None:
        self.endings[kind] += 1
        if detail:
            self.details.add(detail[:600])
            self.python_text += bool(_PYTHON_TEXT.search(detail))

    def line(self) -> str:
        e = self.endings
        return (f"| {self.case} | {self.sent} | {e['4xx']} | {e['5xx']} | {int(self.crashed)} | {e['hang']} | "
                f"{self.good_failed}/{self.good_sent} | {self.peak_mb:.0f} | {self.retained_mb:.0f} | "
                f"{self.python_text} | {dict(e)}{'' if self.model_runs is None else f', model runs {self.model_runs}'}"
                f"{'' if self.cpu_s is None else f', CPU after the answers {self.cpu_s:.1f} s'} |")


HEADER = ("| case | sent | 4xx | 5xx | crash | hang | failed good | peak RSS +MB | retained RSS +MB | py text | "
          "endings |\n|---|---|---|---|---|---|---|---|---|---|---|")


def table(rows: Sequence[Row]) -> str:
    return "\n".join([HEADER, *(row.line() for row in rows)])


def _rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _http_kind(code: int) -> str:
    return "ok" if code < 300 else "4xx" if code < 500 else "5xx"


def good_request() -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "digits"
    codec.ndarray_to_tensor_proto(np.ones((1, 8, 8, 1), np.float32), request.inputs["images"])
    return request


class Probe:
    """A good digits Predict every 100 ms on its own channel; a context manager."""

    def __init__(self, target: str) -> None:
        self._channel = grpc.insecure_channel(target)
        self._stub = Stub(self._channel)
        self._stop = threading.Event()
        self.sent = self.failed = self.errors = 0   # failed: an error or slower than GOOD_WITHIN_S
        self.first = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self._stub.Predict(good_request(), timeout=5.0)
                ok = time.monotonic() - started <= GOOD_WITHIN_S
            except grpc.RpcError:
                ok = False
                self.errors += 1
            self.sent += 1
            self.failed += not ok
            self.first.set()
            self._stop.wait(0.1)

    def __enter__(self) -> "Probe":
        self._thread.start()
        self.first.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._channel.close()


# -- the attacks: each takes the server and the row, sends, and records every ending ------------------
def _grpc_call(row: Row, call: Callable[[], object], timeout: float) -> None:
    row.sent += 1
    try:
        call()
        row.end("ok")
    except grpc.RpcError as error:
        row.end(_grpc_kind(error.code()), error.details() or "")


def broadcast_images(server: ServerProcess, row: Row, rows: int = 500_000) -> None:
    """The 50-byte Predict: digits ``images`` [rows, 8, 8, 1] filled from one float_val."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "digits"
    tensor = request.inputs["images"]
    tensor.dtype = 1
    for size in (rows, 8, 8, 1):
        tensor.tensor_shape.dim.add().size = size
    tensor.float_val.append(1.0)
    with grpc.insecure_channel(server.grpc_target) as channel:
        _grpc_call(row, lambda: Stub(channel).Predict(request, timeout=60), 60)


def string_broadcast(server: ServerProcess, row: Row, count: int = 4000, size: int = 1_000_000) -> None:
    """A Predict of one string of ``size`` bytes filling text's ``text`` [count] (977 KiB filling 4000 by
    default; 98 KiB filling 29000, 2.9 GB decoded, stays under the default per-request budget)."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "text"
    tensor = request.inputs["text"]
    tensor.dtype = 7
    tensor.tensor_shape.dim.add().size = count
    tensor.string_val.append(b"a" * size)
    with grpc.insecure_channel(server.grpc_target) as channel:
        _grpc_call(row, lambda: Stub(channel).Predict(request, timeout=60), 60)


def _context_input(message: object, examples: int = 20_000, context_bytes: int = 100_000) -> None:
    with_context = message.input.example_list_with_context
    with_context.context.features.feature["blob"].bytes_list.value.append(b"c" * context_bytes)
    for _ in range(examples):
        with_context.examples.add()


def _examples_call(server: ServerProcess, row: Row, request: object, method: str) -> None:
    _context_input(request)
    with grpc.insecure_channel(server.grpc_target) as channel:
        call = getattr(Stub(channel), method)
        _grpc_call(row, lambda: call(request, timeout=60), 60)


def classify_context(server: ServerProcess, row: Row) -> None:
    """gRPC Classify on text's ``classification``: a 100 KB context x 20,000 empty examples."""
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name, request.model_spec.signature_name = "text", "classification"
    _examples_call(server, row, request, "Classify")


def regress_context(server: ServerProcess, row: Row) -> None:
    """gRPC Regress on ranker's ``regression``: a 100 KB context x 20,000 empty examples."""
    request = regression_pb2.RegressionRequest()
    request.model_spec.name, request.model_spec.signature_name = "ranker", "regression"
    _examples_call(server, row, request, "Regress")


def classify_context_rest(server: ServerProcess, row: Row) -> None:
    """REST ``:classify``: a 100 KB context x 20,000 empty examples (a 137 KiB body)."""
    body = {"signature_name": "classification", "context": {"blob": "c" * 100_000}, "examples": [{}] * 20_000}
    row.sent += 1
    try:
        answer = httpx.post(f"{server.rest_url}/v1/models/text:classify", json=body, timeout=60)
        row.end(_http_kind(answer.status_code), "" if answer.status_code < 300 else answer.text)
    except httpx.TimeoutException:
        row.end("hang")
    except httpx.TransportError as error:
        row.end("closed", type(error).__name__)


def grpc_gzip_bomb(server: ServerProcess, row: Row, inflated: int = 1 << 30) -> None:
    """A Predict message sent with ``grpc-encoding: gzip``: a 1 MiB bomb inflating to 1 GiB of zeros (the
    client's own gzip of it takes tens of seconds, hence the long deadline)."""
    payload = bytes(inflated)
    with grpc.insecure_channel(server.grpc_target, options=[("grpc.max_send_message_length", -1)],
                               compression=grpc.Compression.Gzip) as channel:
        predict = channel.unary_unary("/tensorflow.serving.PredictionService/Predict")
        _grpc_call(row, lambda: predict(payload, timeout=240), 240)


def _held_body(server: ServerProcess, size: int, payload: memoryview, stop: threading.Event, row: Row,
               lock: threading.Lock) -> None:
    """One connection sending all of a ``size``-byte body but its last byte, then holding it open."""
    with socket.create_connection(("127.0.0.1", server.rest_port), timeout=60) as sock:
        sock.sendall(f"POST /v1/models/digits:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {size}\r\n\r\n".encode())
        try:
            sock.sendall(payload[:size - 1])
        except OSError:
            pass
        stop.wait(60)
        sock.settimeout(0.5)
        try:
            reply = sock.recv(4096).decode("latin-1")
        except OSError:
            reply = ""
    with lock:
        if reply.startswith("HTTP/1.1 "):
            row.end(_http_kind(int(reply[9:12])), reply.split("\r\n\r\n", 1)[-1])
        else:
            row.end("closed")


def incomplete_bodies(server: ServerProcess, row: Row, connections: int = 112, size: int = 60 << 20) -> None:
    """``connections`` REST requests each sending 60 MiB of a 60 MiB body but the last byte, held open at
    once until every one has sent (or been refused), then all closed."""
    payload = memoryview(b" " * size)
    stop, lock = threading.Event(), threading.Lock()
    with futures.ThreadPoolExecutor(connections) as pool:
        held = [pool.submit(_held_body, server, size, payload, stop, row, lock) for _ in range(connections)]
        row.sent = connections
        deadline = time.monotonic() + 25   # inside the server's 30 s read timeout
        while time.monotonic() < deadline and _sending(server.pid) > 0:
            time.sleep(0.5)
        stop.set()
        futures.wait(held, 90)


def _sending(pid: int) -> int:
    """A crude 'still receiving' signal: the server's RSS still grew over the last half second."""
    before = _rss_kib(pid, "VmRSS")
    time.sleep(0.5)
    return max(0, _rss_kib(pid, "VmRSS") - before - 4096)


def concurrent_20mb(server: ServerProcess, row: Row, requests: int = 64) -> None:
    """``requests`` REST Predicts of digits at once, each a 20 MB JSON body (about 75,000 images)."""
    rows = 20_000_000 // 265
    body = codec.json_dumps({"instances": np.ones((rows, 8, 8, 1), np.float32).tolist()})

    def one() -> None:
        try:
            answer = httpx.post(f"{server.rest_url}/v1/models/digits:predict", content=body,
                                headers={"Content-Type": "application/json"}, timeout=120)
            row.end(_http_kind(answer.status_code), "" if answer.status_code < 300 else answer.text)
        except httpx.TimeoutException:
            row.end("hang")
        except httpx.TransportError as error:
            row.end("closed", type(error).__name__)

    runs, probes = _model_runs(server), row.probe.sent
    with futures.ThreadPoolExecutor(requests) as pool:
        row.sent = requests
        list(pool.map(lambda _: one(), range(requests)))
    attack_runs = lambda: _model_runs(server) - runs - (row.probe.sent - probes)  # noqa: E731 - the probe's excluded
    while True:   # until the server's workers are idle: a request answered 504 may still be running
        count = attack_runs()
        time.sleep(5)
        if abs(attack_runs() - count) <= 1:   # a probe call in flight at either reading counts once
            break
    row.model_runs = attack_runs()


def _model_runs(server: ServerProcess, model: str = "digits") -> int:
    """Model runs of ``model`` so far, from the server's own ``runtime_latency`` count."""
    page = httpx.get(server.metrics_url, timeout=30).text
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in page.splitlines()
               if line.startswith(":tensorflow:serving:runtime_latency_count") and f'model_name="{model}"' in line)


def _cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gone_behind_a_nap(server: ServerProcess, row: Row, queued: int = 4, nap_s: float = 0.75) -> None:
    """For a server with one REST thread: a REST Predict of the napping model's ``nap`` (2 x ``nap_s`` s,
    inside the REST timeout), then ``queued`` zero-second naps behind it, each a gzip body inflating to about
    40 MiB of JSON, whose clients close their connections once sent. A last plain zero-second nap is answered
    after everything queued before it (one thread, first come first served). Then ``row.model_runs`` counts
    the abandoned naps that reached the model, and ``row.cpu_s`` the server's CPU seconds from the slow
    answer to that last one: the work done for clients that had gone."""
    runs = _model_runs(server, "napping")
    heavy = gzip.compress(b'{"signature_name": "nap", "instances": [' + b"0.0, " * (8 << 20) + b"0.0]}")
    with _raw_post(server, json.dumps({"signature_name": "nap", "instances": [nap_s]}).encode()) as first:
        for _ in range(queued):   # sent whole behind the first, then gone
            _raw_post(server, heavy, "Content-Encoding: gzip\r\n").close()
        row.sent = 1 + queued
        reply = first.recv(4096).decode("latin-1")
    row.end(_http_kind(int(reply[9:12])), "" if reply[9:10] == "2" else reply.split("\r\n\r\n", 1)[-1])
    row.endings["closed"] += queued
    cpu = _cpu_seconds(server.pid)
    answer = httpx.post(f"{server.rest_url}/v1/models/napping:predict", timeout=60,
                        json={"signature_name": "nap", "instances": [0.0]})
    row.cpu_s = _cpu_seconds(server.pid) - cpu
    row.model_runs = _model_runs(server, "napping") - runs - 1 - (1 if answer.status_code == 200 else 0)
    if answer.status_code != 200:
        row.details.add(f"the last request got {answer.status_code}: the counts may miss late work")


def _raw_post(server: ServerProcess, body: bytes, headers: str = "") -> socket.socket:
    """A socket that has sent a whole REST Predict of the napping model."""
    sock = socket.create_connection(("127.0.0.1", server.rest_port), timeout=60)
    sock.sendall(b"POST /v1/models/napping:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + headers.encode() + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return sock


CASES: dict[str, Callable[[ServerProcess, Row], None]] = {
    "grpc-broadcast-500k": broadcast_images,
    "string-broadcast-4000x1MB": string_broadcast,
    "string-broadcast-29000x98KiB": lambda server, row: string_broadcast(server, row, 29_000, 100_000),
    "classify-context-grpc": classify_context,
    "regress-context-grpc": regress_context,
    "classify-context-rest": classify_context_rest,
    "grpc-gzip-bomb-1GiB": grpc_gzip_bomb,
    "rest-incomplete-bodies-112x60MiB": incomplete_bodies,
    "rest-incomplete-bodies-40x60MiB": lambda server, row: incomplete_bodies(server, row, connections=40),
    "rest-concurrent-64x20MB": concurrent_20mb,
}


def start(repo: Path, workdir: Path, extra_flags: Sequence[str] = (),
          extra_models: Optional[dict[str, Path]] = None) -> ServerProcess:
    """A server for ``MODELS`` in ``repo`` (and ``extra_models``, name -> base path) with ``extra_flags``."""
    models = {**{name: repo / name for name in MODELS}, **(extra_models or {})}
    return ServerProcess.for_models(models, workdir=workdir, extra_flags=list(extra_flags)).start()


def run_case(server: ServerProcess, name: str, attack: Optional[Callable[[ServerProcess, Row], None]] = None) -> Row:
    """``attack`` (default ``CASES[name]``) with the probe beside it; memory from the server's /proc."""
    row = Row(name)
    pid = server.pid
    with Probe(server.grpc_target) as probe:
        row.probe = probe
        before = _rss_kib(pid, "VmRSS")
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        (attack or CASES[name])(server, row)
        row.crashed = not server.running()
        if not row.crashed:
            row.peak_mb = max(0, _rss_kib(pid, "VmHWM") - before) / 1024
            time.sleep(SETTLE_S)
            row.crashed = not server.running()
        if not row.crashed:
            row.retained_mb = max(0, _rss_kib(pid, "VmRSS") - before) / 1024
    row.good_sent, row.good_failed, row.good_errors = probe.sent, probe.failed, probe.errors
    return row


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-repo", type=Path, required=True, help="holds digits, text and ranker")
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="default: every case")
    args = parser.parse_args(argv)
    rows = []
    for name in args.case or list(CASES):
        server = start(args.model_repo, Path(tempfile.mkdtemp(prefix=f"memory-{name}-")))
        try:
            rows.append(run_case(server, name))
        finally:
            server.stop()
        print(rows[-1].line(), flush=True)
        for detail in sorted(rows[-1].details):
            print(f"    {detail}", flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
