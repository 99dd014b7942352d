"""Four attacks on the embedded server: metric labels, reloads that never finish, version names, undecodable text.

Each case runs against a real server on 127.0.0.1 (the tiny test model, started
here) while ``rest_attacks.Probe`` sends a good REST and a good gRPC Predict
every 100 ms; a watcher samples the server's RSS and open descriptors. A case
returns a ``Row``: attack calls sent, their 4xx / 5xx / hang (no answer within
the call's own deadline) counts, whether the server died, failed good requests
(the probe's, plus the case's own good calls: a valid reload, a poll that must
apply), RSS and descriptors before / at peak / after, and replies that carried
Python text or were not JSON.

- ``labels``: Predicts naming models that do not exist, each name ``name_bytes``
  long, then one scrape of the metrics page (its size and time).
- ``reloads``: HandleReloadConfigRequest naming a model whose base path has no
  version (``/``, an empty directory, a missing one, a symlink loop), each with a
  2 s deadline and each followed by a valid reload; then eight such reloads with
  no deadline held open beside the probe and a valid reload; then a config file
  naming such a model, followed by a good one that must be applied.
- ``versions``: a copy of version 1 named ``99999999999999999999`` appears; then
  Predicts and GetModelStatus must answer OK from version 1.
- ``text``: lone surrogates in bodies and signature names, %-escapes that are
  not UTF-8 in model names and labels, raw bytes that are not HTTP.

Run as a script it prints the rows for whatever ``serving`` package is first on
``PYTHONPATH``; it imports only what the code before these fixes has too::

    PYTHONPATH=OLD_CHECKOUT .venv/bin/python tests/support/security/misc_attacks.py      # before
    PYTHONPATH=$PWD .venv/bin/python tests/support/security/misc_attacks.py           # after
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import grpc
import numpy as np
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from tensorflow_serving.config import model_server_config_pb2

from serving import codec
from serving.launcher import ServerProcess, write_config_files
from tests.support.security.rest_attacks import Probe, rss_kib
from tests.support.models import export_tiny

__all__ = ["Row", "CASES", "MODEL", "OUT_OF_RANGE_VERSION", "tiny_repo", "start", "case_labels", "case_reloads",
           "case_versions", "case_text", "python_text", "main"]

MODEL = "tiny"
OUT_OF_RANGE_VERSION = "99999999999999999999"   # > int64
GOOD_WITHIN_S = 5.0          # a valid reload or an applied config file, each within this
_PYTHON_TEXT = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception)\b|Traceback|File \"|Server got itself in trouble")


def python_text(text: str) -> bool:
    """Whether a reply carries a Python exception class, a traceback or aiohttp's own error page."""
    return bool(_PYTHON_TEXT.search(text))


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


@dataclass
class Row:
    """One case's line of the before/after table."""

    case: str
    sent: int = 0
    c4xx: int = 0
    c5xx: int = 0
    hangs: int = 0
    crashed: bool = False
    good_sent: int = 0
    good_failed: list[str] = field(default_factory=list)
    rss_mib: tuple[float, float, float] = (0.0, 0.0, 0.0)   # before, peak, after
    fds: tuple[int, int, int] = (0, 0, 0)
    python_text: int = 0
    not_json: int = 0
    codes: dict[str, int] = field(default_factory=dict)
    note: str = ""
    page_bytes: int = 0

    def count(self, code: str, http_status: int) -> None:
        self.sent += 1
        self.codes[code] = self.codes.get(code, 0) + 1
        if code in ("DEADLINE_EXCEEDED", "no answer"):
            self.hangs += 1
        elif 400 <= http_status < 500:
            self.c4xx += 1
        elif http_status >= 500:
            self.c5xx += 1

    @property
    def peak_growth_mib(self) -> float:
        return max(0.0, self.rss_mib[1] - self.rss_mib[0])

    @property
    def retained_mib(self) -> float:
        return max(0.0, self.rss_mib[2] - self.rss_mib[0])

    def line(self) -> str:
        codes = ", ".join(f"{k} {v}" for k, v in sorted(self.codes.items()))
        return (f"| {self.case} | {self.sent} | {self.c4xx} | {self.c5xx} | {int(self.crashed)} | {self.hangs} | "
                f"{len(self.good_failed)}/{self.good_sent} | +{self.peak_growth_mib:.0f} | +{self.retained_mib:.0f} | "
                f"{self.fds[0]}/{self.fds[1]}/{self.fds[2]} | {self.python_text + self.not_json} | {codes} | "
                f"{self.note} |")


HEADER = ("| case | sent | 4xx | 5xx | crash | hang | failed good | peak RSS MiB | retained RSS MiB | "
          "fds before/peak/after | Python text or not JSON | codes | note |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|")


class Watch:
    """The server's RSS and descriptors sampled every 50 ms around an attack, with the good probe."""

    def __init__(self, server: ServerProcess, row: Row) -> None:
        self._server, self._row = server, row
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watch", daemon=True)
        self._rss = [rss_kib(server.pid)] * 2
        self._fds = [fd_count(server.pid)] * 2
        self._probe = Probe(server)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self._rss[1] = max(self._rss[1], rss_kib(self._server.pid))
            self._fds[1] = max(self._fds[1], fd_count(self._server.pid))

    def __enter__(self) -> "Watch":
        self._thread.start()
        self._probe.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._probe.__exit__()
        self._stop.set()
        self._thread.join(10)
        row, pid = self._row, self._server.pid
        row.crashed = not self._server.running()
        row.good_sent += self._probe.sent
        row.good_failed += self._probe.failed
        after_rss, after_fds = rss_kib(pid), fd_count(pid)
        row.rss_mib = (self._rss[0] / 1024, max(self._rss[1], after_rss) / 1024, after_rss / 1024)
        row.fds = (self._fds[0], max(self._fds[1], after_fds), after_fds)


# -- servers ------------------------------------------------------------------------------------
def tiny_repo(root: Path) -> Path:
    """``root/tiny/1``: the tiny model, exported unless already there."""
    if not (root / MODEL / "1" / "saved_model.pb").exists():
        export_tiny(root / MODEL / "1")
    return root


def start(workdir: Path, models: dict[str, Path], *extra: str) -> ServerProcess:
    """A server for ``models`` with its config files in ``workdir``; warmed by one good REST and gRPC call."""
    server = ServerProcess.for_models(models, workdir=workdir, extra_flags=["--file_system_poll_wait_seconds=1",
                                                                            *extra]).start()
    warm = Probe(server)
    warm.timed("REST", warm.rest_once)
    warm.timed("gRPC", warm.grpc_once)
    return server


def _channel(server: ServerProcess) -> grpc.Channel:
    return grpc.insecure_channel(server.grpc_target, options=[("grpc.max_send_message_length", 64 << 20)])


def _code(call: Callable[[], object]) -> str:
    try:
        call()
        return "OK"
    except grpc.RpcError as error:
        return error.code().name


_HTTP = {"OK": 200, "INVALID_ARGUMENT": 400, "NOT_FOUND": 404, "ABORTED": 409, "FAILED_PRECONDITION": 400,
         "RESOURCE_EXHAUSTED": 429, "CANCELLED": 499, "UNKNOWN": 500, "INTERNAL": 500, "UNAVAILABLE": 503}


# -- case 5: metric labels --------------------------------------------------------------------------
def case_labels(server: ServerProcess, names: int = 300, name_bytes: int = 1 << 20) -> Row:
    row = Row(f"labels: {names} unknown model names of {name_bytes >> 10} KiB")
    with _channel(server) as channel, Watch(server, row):
        predict = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict
        for index in range(names):
            request = predict_pb2.PredictRequest()
            request.model_spec.name = f"{index:08d}".ljust(name_bytes, "x")
            codec.ndarray_to_tensor_proto(np.ones((1, 3), np.float32), request.inputs["x"])
            code = _code(lambda request=request: predict(request, timeout=30))
            row.count(code, _HTTP.get(code, 500))
            if code != "NOT_FOUND":
                row.good_failed.append(f"unknown model name: {code}")
        started = time.monotonic()
        page = _get(server.metrics_url, timeout=60)
        row.note = f"metrics page {len(page) / 1024:.0f} KiB in {time.monotonic() - started:.2f} s"
        row.page_bytes = len(page)
    return row


def _get(url: str, timeout: float) -> bytes:
    import httpx  # the probe's client too

    return httpx.get(url, timeout=timeout).content


# -- case 7: reloads that never finish --------------------------------------------------------------
def _config(models: dict[str, str]) -> model_server_config_pb2.ModelServerConfig:
    config = model_server_config_pb2.ModelServerConfig()
    for name, base_path in models.items():
        entry = config.model_config_list.config.add()
        entry.name, entry.base_path, entry.model_platform = name, base_path, "tensorflow"
    return config


def _reload_request(models: dict[str, str]) -> model_management_pb2.ReloadConfigRequest:
    request = model_management_pb2.ReloadConfigRequest()
    request.config.CopyFrom(_config(models))
    return request


def bad_base_paths(root: Path) -> dict[str, str]:
    """Base paths that never hold a version: the root, an empty directory, a missing one, a symlink loop."""
    (root / "empty").mkdir(parents=True, exist_ok=True)
    loop = root / "loop"
    if not loop.is_symlink():
        loop.symlink_to(loop)
    return {"root": "/", "empty": str(root / "empty"), "missing": str(root / "missing"), "loop": str(loop)}


def case_reloads(server: ServerProcess, scratch: Path, poll_server: Optional[ServerProcess] = None,
                 poll_config: Optional[Path] = None) -> Row:
    row = Row("reloads naming a base path without versions")
    good = {MODEL: str((Path(scratch) / "repo" / MODEL).resolve())}
    with _channel(server) as channel, Watch(server, row):
        reload = model_service_pb2_grpc.ModelServiceStub(channel).HandleReloadConfigRequest

        def valid_reload(what: str) -> None:
            row.good_sent += 1
            code = _code(lambda: reload(_reload_request(good), timeout=GOOD_WITHIN_S))
            if code != "OK":
                row.good_failed.append(f"valid reload after {what}: {code}")

        for kind, path in bad_base_paths(Path(scratch)).items():
            code = _code(lambda kind=kind, path=path: reload(_reload_request({**good, f"bad_{kind}": path}),
                                                             timeout=2.0))
            row.count(code, _HTTP.get(code, 500))
            valid_reload(f"a reload of {kind} that timed out")
        held = [reload.future(_reload_request({**good, f"held_{i}": str(Path(scratch) / f"missing{i}")}))
                for i in range(8)]
        # Each held reload is replaced by the next to arrive, so once seven are answered all eight have
        # arrived; the valid reload below must not overtake the last of them on a loaded machine.
        _wait_for(lambda: sum(f.done() for f in held) >= len(held) - 1, GOOD_WITHIN_S)
        row.good_sent += 1   # a good Predict beside the eight held reloads
        beside = _code(lambda: prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(
            _good_predict(), timeout=GOOD_WITHIN_S))
        if beside != "OK":
            row.good_failed.append(f"Predict beside 8 held reloads: {beside}")
        valid_reload("8 held reloads")
        _wait_for(lambda: all(f.done() for f in held), 3.0)   # answered, or still held by the server
        for future in held:
            code = future.code().name if future.done() else "no answer"
            future.cancel()
            row.count(code, _HTTP.get(code, 0))
    if poll_server is not None and poll_config is not None:
        _poll_case(row, poll_server, poll_config, scratch)
    return row


def _good_predict() -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = MODEL
    codec.ndarray_to_tensor_proto(np.ones((1, 3), np.float32), request.inputs["x"])
    return request


def _poll_case(row: Row, server: ServerProcess, config_file: Path, scratch: Path) -> None:
    """The polled config file names a model without versions, then a good config adding ``tiny2``."""
    repo = Path(scratch) / "repo"
    if not (repo / "tiny2").exists():
        shutil.copytree(repo / MODEL, repo / "tiny2")
    base = {MODEL: (repo / MODEL).resolve()}
    write_config_files(config_file.parent, {**base, "never": Path(scratch) / "never"})
    row.sent += 1
    row.codes["config file naming a missing base path"] = 1
    applied = _wait_for(lambda: "never" in server.log_tail(400), 15.0)
    if not applied:
        row.good_failed.append("the poller never applied the config naming 'never'")
    write_config_files(config_file.parent, {**base, "tiny2": (repo / "tiny2").resolve()})
    row.good_sent += 1
    started = time.monotonic()
    with _channel(server) as channel:
        status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus

        def tiny2_available() -> bool:
            request = get_model_status_pb2.GetModelStatusRequest()
            request.model_spec.name = "tiny2"
            try:
                return any(v.state == 30 for v in status(request, timeout=2).model_version_status)
            except grpc.RpcError:
                return False

        if _wait_for(tiny2_available, 20.0):
            row.note = f"the next good config file applied in {time.monotonic() - started:.1f} s"
        else:
            row.good_failed.append("the good config file was not applied within 20 s")
            row.note = "the next good config file never applied"


def _wait_for(condition: Callable[[], bool], bound_s: float) -> bool:
    """Poll ``condition`` (every 0.2 s) until it holds or ``bound_s`` passes: waits on the server, not a sleep."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


# -- case 9: a version directory beyond int64 ------------------------------------------------------
def case_versions(server: ServerProcess, repo: Path, calls: int = 20) -> Row:
    row = Row(f"version directory {OUT_OF_RANGE_VERSION} (a copy of version 1)")
    with _channel(server) as channel, Watch(server, row):
        shutil.copytree(repo / MODEL / "1", repo / MODEL / OUT_OF_RANGE_VERSION)
        seen = _wait_for(lambda: re.search(rf"(Ignoring version directory \S*{OUT_OF_RANGE_VERSION}|"
                                           rf"Successfully loaded servable version .*{OUT_OF_RANGE_VERSION})",
                                           server.log_tail(400)) is not None, 30.0)
        row.note = "" if seen else "the server never logged the directory"
        predict = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict
        status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus
        status_request = get_model_status_pb2.GetModelStatusRequest()
        status_request.model_spec.name = MODEL
        row.good_sent += 2 * calls   # good calls, the attack's own measure
        for _ in range(calls):
            for call in (lambda: predict(_good_predict(), timeout=5), lambda: status(status_request, timeout=5)):
                code = _code(call)
                row.count(code, _HTTP.get(code, 500))
                if code != "OK":
                    row.good_failed.append(f"a call after the directory appeared: {code}")
    warnings = server.log_tail(2000).count(f"Ignoring version directory {repo / MODEL / OUT_OF_RANGE_VERSION}")
    row.note += f"warnings logged: {warnings}"
    return row


# -- case 10: text that is not UTF-8 -----------------------------------------------------------------
PREDICT = f"/v1/models/{MODEL}:predict"
TEXT_ATTACKS: tuple[tuple[str, bytes, bytes], ...] = (
    ("body [\"\\ud800\"]", PREDICT.encode(), b'["\\ud800"]'),
    ("instances [\"\\ud800\"]", PREDICT.encode(), b'{"instances": ["\\ud800"]}'),
    ("signature name \\ud800", PREDICT.encode(), b'{"signature_name": "\\ud800", "instances": [[1, 2, 3]]}'),
    ("strings input \\ud800", PREDICT.encode(), b'{"signature_name": "strings", "instances": ["\\ud800"]}'),
    ("input name \\udc00", PREDICT.encode(), b'{"instances": [{"\\udc00": [1, 2, 3]}]}'),
    ("NaN then \\ud800", PREDICT.encode(), b'{"instances": [[1, 2, NaN]], "signature_name": "\\ud800"}'),
    ("body not UTF-8", PREDICT.encode(), b'{"signature_name": "\xff\xfe", "instances": [[1, 2, 3]]}'),
    ("model name %ff", b"/v1/models/ti%ffny:predict", b'{"instances": [[1, 2, 3]]}'),
    ("model name %ED%A0%80 (a surrogate)", b"/v1/models/ti%ED%A0%80ny:predict", b'{"instances": [[1, 2, 3]]}'),
    ("label %ff", b"/v1/models/tiny/labels/%ff:predict", b'{"instances": [[1, 2, 3]]}'),
    ("label %zz", b"/v1/models/tiny/labels/%zz:predict", b'{"instances": [[1, 2, 3]]}'),
    ("raw byte in the path", b"/v1/models/ti\xffny:predict", b'{"instances": [[1, 2, 3]]}'),
    ("raw byte in the method", PREDICT.encode(), b'{"instances": [[1, 2, 3]]}'),
)


def _raw_post(server: ServerProcess, path: bytes, body: bytes, method: bytes = b"POST") -> tuple[int, bytes, bytes]:
    """POST on a fresh socket; the status (0 when closed without one), the headers and the body."""
    with socket.create_connection(("127.0.0.1", server.rest_port), timeout=30) as sock:
        sock.sendall(method + b" " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, reply = data.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split(b" ")
    return (int(status_line[1]) if len(status_line) > 1 and status_line[1].isdigit() else 0), head, reply


def case_text(server: ServerProcess, rounds: int = 3) -> Row:
    row = Row("undecodable text (surrogates, %-escapes, raw bytes)")
    with Watch(server, row):
        for _ in range(rounds):
            for name, path, body in TEXT_ATTACKS:
                method = b"PO\xffST" if name == "raw byte in the method" else b"POST"
                try:
                    http_status, head, reply = _raw_post(server, path, body, method)
                except OSError:
                    http_status, head, reply = 0, b"", b""
                row.count(str(http_status) if http_status else "no answer", http_status)
                text = reply.decode("utf-8", errors="replace")
                row.python_text += python_text(text)
                row.not_json += not _is_error_json(head, reply)
    return row


def _is_error_json(head: bytes, reply: bytes) -> bool:
    """TF Serving's JSON error, or its empty body: http_server.cc writes whatever the handler put in its output,
    and the handler's early refusals (a version or a path it cannot decode) put nothing there."""
    if reply == b"":
        return True
    if b"application/json" not in head.lower():
        return False
    try:
        return isinstance(json.loads(reply).get("error"), str)
    except (ValueError, AttributeError):
        return False


# -- the table ------------------------------------------------------------------------------------
CASES = ("labels", "text", "reloads", "versions")


def run_all(workdir: Path, names: int = 300, name_bytes: int = 1 << 20, cases: Sequence[str] = CASES) -> list[Row]:
    repo = tiny_repo(workdir / "repo")
    rows = []
    if {"labels", "text", "reloads"} & set(cases):
        server = start(workdir / "server", {MODEL: repo / MODEL})
        try:
            if "labels" in cases:
                rows.append(case_labels(server, names, name_bytes))
            if "text" in cases:
                rows.append(case_text(server))
            if "reloads" in cases:
                poll = start(workdir / "poll-server", {MODEL: repo / MODEL}, "--model_config_file_poll_wait_seconds=1")
                try:
                    rows.append(case_reloads(server, workdir, poll, workdir / "poll-server" / "models.config"))
                finally:
                    poll.stop(timeout=10)
        finally:
            server.stop(timeout=10)
    if "versions" in cases:
        versions_repo = workdir / "versions-repo"
        shutil.copytree(repo / MODEL / "1", versions_repo / MODEL / "1", dirs_exist_ok=True)
        server = start(workdir / "versions-server", {MODEL: versions_repo / MODEL})
        try:
            rows.append(case_versions(server, versions_repo))
        finally:
            server.stop(timeout=10)
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None, help="models and server files (default: a temp dir)")
    parser.add_argument("--names", type=int, default=300, help="unknown model names sent (labels case)")
    parser.add_argument("--name-kib", type=int, default=1024, help="length of each name in KiB")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="misc-attacks-"))
    rows = run_all(workdir, args.names, args.name_kib << 10, [c for c in args.cases.split(",") if c])
    print(HEADER)
    for row in rows:
        print(row.line())
        for failure in row.good_failed[:5]:
            print(f"    failed good: {failure}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
