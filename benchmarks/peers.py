"""The embedded server beside the Python servers a user would pick instead, in interleaved rounds.

Each server serves the same SavedModel, one model at a time, restarted every round:

- the embedded server (``python -m serving.server``, through ``serving.server.launcher``),
  without and with batching (``--batching-config``, default ``serving/batching.cpu.config``);
- the peers, each running its idiomatic app (``benchmarks/peer_apps/``) in its own virtual
  environment under ``.cache/peers/<name>/`` that this script builds at pinned versions (with the
  same ``tensorflow-cpu`` and numpy pins): "Flask + model.predict()" under gunicorn (8 threads,
  1 worker and 2 workers), FastAPI under uvicorn, KServe 0.15's Python ``ModelServer``. The
  first build downloads TensorFlow for each environment: minutes. A peer that cannot be installed
  or started is skipped, and the report says why;
- real TF Serving in Docker: the compose CPU variant's image (``tensorflow/serving:<TF_SERVING_VERSION
  of .env>``, ``serving.stack.docker.tfserving_image``) through ``serving.stack.docker.run_tf_serving``,
  skipped with the reason where no engine answers or the image is not present locally (never pulled);
- the in-process ceiling: the SavedModel loaded as the server loads it, Session callables at
  batch 1 and 8 (``benchmarks.server.measure_in_process``).

One neutral client drives every server: aiohttp, TF Serving REST bodies of one example
(``{"instances": [...]}``), closed loop at concurrency 1 and a high one (32; 8 for resnet50).
The embedded server is also driven over gRPC by a lean raw-bytes client
(``benchmarks.server.run_grpc``) and, for the SDK comparison, by ``serving.client``'s
``GrpcClient`` and ``RestClient`` from threads. Per point: requests/s, p50/p99, and the server's
CPU-ms per request (utime + stime from ``/proc/<pid>/stat`` of the server's process tree over
the timed window). Per server start: cold start (process start to the first successful answer)
and RSS of the process tree after warmup. Each peer's answer is checked against the embedded
server's before it is timed.

The report (``render``, a pure function of the measurements dict that ``--json`` writes) gives
medians over the rounds with their spread, the ratios (embedded / each peer, served /
in-process) and the speed targets; the exit status is 1 when a target is missed, and the
report names it.

    python -m benchmarks.peers                                  # both models, every peer (tens of minutes)
    python -m benchmarks.peers --models digits --rounds 3 --peers flask-1w,fastapi
    python -m benchmarks.peers --quick --json /tmp/peers.json   # one short round
    python -m benchmarks.peers --render /tmp/peers.json         # the report of a recorded run
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import aiohttp
import numpy as np
import psutil
from google.protobuf import text_format

from benchmarks.server import Target, measure_in_process, process_cpu_seconds, run_grpc
from exporter.export import ensure_model
from exporter.manifest import load_manifest
from serving import codec
from serving.client import GrpcClient, RestClient
from serving.config.protos import batching_parameters_class
from serving.model_repo import model_versions
from serving.server.launcher import REPO_ROOT, ServerProcess, free_port
from serving.stack.docker import Mount, TFServingContainer, TFServingUnavailable, run_tf_serving, tfserving_image

__all__ = [
    "comparable_series",
    "PEERS",
    "TODAY_RESNET50_REST_C1",
    "PeerProcess",
    "PeerSpec",
    "PeerUnavailable",
    "answers_agree",
    "build_parser",
    "ensure_venv",
    "evaluate",
    "exit_code",
    "grpc_load",
    "main",
    "measure_point",
    "render",
    "rest_load",
    "sdk_load",
    "tree_cpu_seconds",
    "tree_rss_mb",
    "tree_rss_anon_mb",
    "wait_for_answer",
]

logger = logging.getLogger("benchmarks.peers")

APPS = Path(__file__).resolve().parent / "peer_apps"
VENV_ROOT = REPO_ROOT / ".cache" / "peers"

# The "today" baseline of the resnet50 REST target: the embedded server's resnet50 REST rate at
# c=1, 3.3 req/s, measured before the REST work (gc.freeze, JSON straight into numpy) on the
# 2-core development machine. A constant on purpose: the target is "2x what it was".
TODAY_RESNET50_REST_C1 = 3.3

# The peers' interpreter pins: the project's own (pyproject.toml's `tf` extra and base), so every
# server runs the same TensorFlow build.
BASE_REQUIREMENTS = ("tensorflow-cpu==2.17.1", "numpy==1.26.4")

# Benchmark defaults per model (a model not listed gets the first entry's values).
HIGH_CONCURRENCY = {"digits": 32, "resnet50": 8}
LARGE_MODELS = ("resnet50",)      # measured with --resnet50-duration
SDK_MODELS = ("digits",)          # where the SDK's GrpcClient and RestClient are compared

Load = Callable[[int, float, float], "tuple[list[float], int]"]
"""``load(concurrency, warmup_s, duration_s) -> (latencies of calls ending in the window, errors)``."""


# ---------------------------------------------------------------------------- the peers

class PeerUnavailable(RuntimeError):
    """A peer that cannot be installed or started here; the message says why."""


@dataclass(frozen=True)
class PeerSpec:
    """A peer server: its venv (shared by variants of one framework), pins and command line."""

    name: str
    venv: str
    requirements: tuple[str, ...]
    argv: Callable[[Path, str, str, int, int], list[str]]  # (venv, model, version dir, port, spare port)
    env: Callable[[str, str], dict[str, str]] = lambda model, path: {}

    def pinned(self) -> str:
        return "".join(f"{r}\n" for r in BASE_REQUIREMENTS + self.requirements)


def _gunicorn(workers: int) -> Callable[[Path, str, str, int, int], list[str]]:
    def argv(venv: Path, model: str, path: str, port: int, _: int) -> list[str]:
        return [str(venv / "bin" / "gunicorn"), "--workers", str(workers), "--threads", "8",
                "--bind", f"127.0.0.1:{port}", "--chdir", str(APPS), f"flask_app:create_app({model!r}, {path!r})"]
    return argv


PEERS: dict[str, PeerSpec] = {spec.name: spec for spec in (
    PeerSpec("flask-1w", "flask", ("flask==3.1.3", "gunicorn==23.0.0"), _gunicorn(1)),
    PeerSpec("flask-2w", "flask", ("flask==3.1.3", "gunicorn==23.0.0"), _gunicorn(2)),
    PeerSpec("fastapi", "fastapi", ("fastapi==0.115.12", "uvicorn==0.34.2"),
             lambda venv, model, path, port, _: [str(venv / "bin" / "uvicorn"), "--factory", "--app-dir", str(APPS),
                                                 "--host", "127.0.0.1", "--port", str(port), "fastapi_app:create_app"],
             env=lambda model, path: {"MODEL_NAME": model, "MODEL_PATH": path}),
    PeerSpec("kserve", "kserve", ("kserve==0.15.2",),
             lambda venv, model, path, port, spare: [str(venv / "bin" / "python"), str(APPS / "kserve_app.py"),
                                                     "--model_name", model, "--model_dir", path,
                                                     "--http_port", str(port), "--grpc_port", str(spare)]),
)}


def ensure_venv(spec: PeerSpec, root: Path = VENV_ROOT) -> Path:
    """The peer's venv under ``root``, built with its pins unless a build with the same pins exists.

    The pins are written to ``<venv>/peer-requirements.txt`` after a successful install; a venv
    without it (or with other pins) is built anew. ``PeerUnavailable`` says why an install failed.
    """
    venv = root / spec.venv
    stamp = venv / "peer-requirements.txt"
    if stamp.exists() and stamp.read_text() == spec.pinned():
        return venv
    print(f"installing peer '{spec.venv}' into {venv}: {' '.join(BASE_REQUIREMENTS + spec.requirements)} "
          f"(first time only; TensorFlow is large, this takes minutes)", flush=True)
    root.mkdir(parents=True, exist_ok=True)
    log = root / f"{spec.venv}.install.log"
    steps = [[sys.executable, "-m", "venv", "--clear", str(venv)],
             [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--upgrade", "pip"],
             [str(venv / "bin" / "python"), "-m", "pip", "install", *BASE_REQUIREMENTS, *spec.requirements]]
    with open(log, "wb") as out:
        for step in steps:
            done = subprocess.run(step, check=False, stdout=out, stderr=subprocess.STDOUT, env=_clean_env())
            if done.returncode != 0:
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-5:])
                raise PeerUnavailable(f"`{' '.join(step[-3:])}` failed (log {log}):\n{tail}")
    stamp.write_text(spec.pinned())
    return venv


def _clean_env(extra: Mapping[str, str] = {}) -> dict[str, str]:
    """The environment of a peer process: no PYTHONPATH (nothing of this checkout leaks in)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return {"TF_CPP_MIN_LOG_LEVEL": "2", **env, "PYTHONUNBUFFERED": "1", **extra}


class PeerProcess:
    """One peer (or any server command) in its own process group; ``start()`` / ``stop()``."""

    def __init__(self, argv: Sequence[str], port: int, env: Mapping[str, str], log_path: Path) -> None:
        self.argv, self.port, self.env, self.log_path = list(argv), port, dict(env), log_path
        self.proc: Optional[subprocess.Popen] = None
        self.launched_at = 0.0  # time.perf_counter() at the process's start: cold start counts from here

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    def launch(self) -> None:
        with open(self.log_path, "wb") as log:
            self.launched_at = time.perf_counter()
            self.proc = subprocess.Popen(self.argv, cwd=APPS, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL to the process group this object started, after ``timeout``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


# ---------------------------------------------------------------------------- clients

def rest_load(url: str, model: str, body: bytes) -> Load:
    """The neutral client: aiohttp, one keep-alive connection per in-flight request, closed loop."""
    path = f"{url}/v1/models/{model}:predict"

    def load(concurrency: int, warmup: float, duration: float) -> tuple[list[float], int]:
        return asyncio.run(_rest_loop(path, body, concurrency, warmup, duration))
    return load


class _Window:
    """A closed loop's timed window: latencies of calls that end inside it, and every error."""

    def __init__(self, warmup: float, duration: float) -> None:
        begin = time.perf_counter()
        self.start, self.end = begin + warmup, begin + warmup + duration
        self.latencies: list[float] = []
        self.errors = 0
        self._lock = threading.Lock()

    def record(self, began: float, ok: bool) -> bool:
        """Count one call that began at ``began``; whether its caller should stop (the window is over)."""
        now = time.perf_counter()
        with self._lock:
            if not ok:
                self.errors += 1
            elif self.start <= now <= self.end:
                self.latencies.append(now - began)
        return now >= self.end


async def _rest_loop(path: str, body: bytes, concurrency: int, warmup: float,
                     duration: float) -> tuple[list[float], int]:
    headers = {"Content-Type": "application/json"}
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency), timeout=timeout) as session:
        window = _Window(warmup, duration)

        async def worker() -> None:
            done = False
            while not done:
                began = time.perf_counter()
                try:
                    async with session.post(path, data=body, headers=headers) as response:
                        await response.read()
                        ok = response.status == 200
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    ok = False
                done = window.record(began, ok)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return window.latencies, window.errors


def grpc_load(target: str, payload: bytes) -> Load:
    """The lean raw-bytes gRPC client of ``benchmarks.server`` (callbacks, no client threads)."""
    return lambda concurrency, warmup, duration: run_grpc(target, payload, concurrency, warmup, duration)


def sdk_load(client: Any, model: str, inputs: Mapping[str, np.ndarray]) -> Load:
    """``client.predict`` (one SDK client shared, as documented) from ``concurrency`` threads."""
    def call() -> None:
        client.predict(model, inputs)
    return lambda concurrency, warmup, duration: _threads_loop(call, concurrency, warmup, duration)


def _threads_loop(call: Callable[[], object], concurrency: int, warmup: float,
                  duration: float) -> tuple[list[float], int]:
    window = _Window(warmup, duration)

    def loop() -> None:
        done = False
        while not done:
            began = time.perf_counter()
            try:
                call()
                ok = True
            except Exception:  # noqa: BLE001 - any failed call counts as an error, the loop goes on
                ok = False
            done = window.record(began, ok)

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return window.latencies, window.errors


# ---------------------------------------------------------------------------- server-side figures

def _descendants(pid: int) -> list[int]:
    try:
        return [pid] + [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_cpu_seconds(pid: int) -> float:
    """utime + stime (``/proc/<pid>/stat``) of ``pid`` and its descendants, in seconds."""
    seconds = 0.0
    for member in _descendants(pid):
        try:
            seconds += process_cpu_seconds(member)
        except OSError:  # the process ended since the tree was listed
            continue
    return seconds


def tree_rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants, MB (shared pages count once per process)."""
    total = 0
    for member in _descendants(pid):
        try:
            total += psutil.Process(member).memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / 1e6


def tree_rss_anon_mb(pid: int) -> float:
    """Anonymous resident memory (``RssAnon``: heap, stacks, arenas) of ``pid`` and its descendants, MB.

    What a server allocates itself. RSS adds file-backed pages, mostly the shared, clean text of
    ``libtensorflow_cc.so``, and how much of it a process maps depends on the page cache: the same
    ``import tensorflow`` maps ~220 MB of the dev venv's copy and ~160 MB of a peer venv's byte-identical
    copy. Both figures are printed.
    """
    total = 0.0
    for member in _descendants(pid):
        try:
            fields = dict(line.split(":", 1) for line in Path(f"/proc/{member}/status").read_text().splitlines()
                          if line.startswith("RssAnon"))
        except OSError:
            continue
        total += int(fields.get("RssAnon", "0 kB").split()[0]) / 1e3
    return total


def measure_point(pid: Optional[int], load: Load, concurrency: int, warmup: float, duration: float) -> dict:
    """One closed-loop point: req/s, p50/p99 ms and the server tree's CPU-ms per request in the window."""
    samples: dict[str, float] = {}

    def sample(key: str) -> None:
        if pid is not None:
            samples[key] = tree_cpu_seconds(pid)

    timers = [threading.Timer(warmup, sample, ("start",)), threading.Timer(warmup + duration, sample, ("end",))]
    for timer in timers:
        timer.start()
    latencies, errors = load(concurrency, warmup, duration)
    for timer in timers:
        timer.join()
    count = len(latencies)
    cpu_ms = (samples["end"] - samples["start"]) * 1e3 / count if count and len(samples) == 2 else None
    return {"rps": count / duration, "p50_ms": _percentile_ms(latencies, 50), "p99_ms": _percentile_ms(latencies, 99),
            "cpu_ms": cpu_ms, "requests": count, "errors": errors}


def _percentile_ms(latencies: Sequence[float], q: float) -> Optional[float]:
    return float(np.percentile(latencies, q)) * 1e3 if latencies else None


def wait_for_answer(rest_url: str, model: str, body: bytes, timeout: float,
                    alive: Callable[[], bool]) -> bytes:
    """POST ``body`` to Predict until it answers 200; the answer. ``RuntimeError`` when the process dies."""
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(f"{rest_url}/v1/models/{model}:predict", data=body,
                                     headers={"Content-Type": "application/json"})
    while True:
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.read()
        except (OSError, urllib.error.HTTPError):
            pass
        if not alive():
            raise RuntimeError("the server exited before answering")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no answer within {timeout:.0f}s")
        time.sleep(0.05)


def answers_agree(reference: bytes, answer: bytes, atol: float, rtol: float) -> Optional[str]:
    """None when two REST Predict answers hold the same outputs within tolerance, else what differs."""
    expected, got = codec.rest_response_to_outputs(reference), codec.rest_response_to_outputs(answer)
    if set(expected) != set(got):
        return f"outputs {sorted(got)} instead of {sorted(expected)}"
    for name, value in expected.items():
        other = np.asarray(got[name])
        if other.shape != np.shape(value):
            return f"output {name!r}: shape {other.shape} instead of {np.shape(value)}"
        if not np.allclose(other.astype(np.float64), np.asarray(value, np.float64), atol=atol, rtol=rtol):
            return f"output {name!r}: max difference {np.max(np.abs(other - value)):.3g} (atol {atol}, rtol {rtol})"
    return None


# ---------------------------------------------------------------------------- one round

@dataclass
class Bench:
    """What a run measures, and where its measurements go (the dict ``render`` reads)."""

    repo: Path
    models: Sequence[str]
    peers: Sequence[str]
    batching_file: Path
    warmups: Mapping[str, float]
    durations: Mapping[str, float]
    workdir: Path
    measurements: dict = field(default_factory=dict)
    references: dict = field(default_factory=dict)

    def record(self, model: str, server: str, key: str, value: Any) -> None:
        entry = self.measurements.setdefault("servers", {}).setdefault(model, {}).setdefault(server, {})
        if key.startswith("point:"):
            entry.setdefault("points", {}).setdefault(key[6:], []).append(value)
        else:
            entry.setdefault(key, []).append(value)

    def skip(self, name: str, reason: str) -> None:
        if name not in self.measurements.setdefault("skipped", {}):
            print(f"SKIP {name}: {reason}", flush=True)
            self.measurements["skipped"][name] = reason


def _version_dir(repo: Path, model: str) -> Path:
    return repo / model / str(max(model_versions(repo / model)))


def _batching_proto(path: Path) -> Any:
    return text_format.Parse(path.read_text(), batching_parameters_class()())


def run_round(bench: Bench, round_index: int) -> None:
    """Every server of every model once (started, timed, stopped), in an order that rotates per round."""
    for model in bench.models:
        version_dir = _version_dir(bench.repo, model)
        inputs = load_manifest(version_dir).sample_inputs(batch_size=1)
        body = codec.inputs_to_rest_request(inputs)
        servers = ["embedded", "embedded+batching", *bench.peers]
        shift = round_index % len(servers)
        for server in servers[shift:] + servers[:shift]:
            try:
                if server.startswith("embedded"):
                    _time_embedded(bench, model, version_dir, inputs, body, batching=server != "embedded")
                else:
                    _time_peer(bench, model, version_dir, body, server)
            except (RuntimeError, TimeoutError, PeerUnavailable) as error:
                bench.skip(f"{server}/{model}", str(error))
        _time_in_process(bench, model, version_dir)


def _time_embedded(bench: Bench, model: str, version_dir: Path, inputs: Mapping[str, np.ndarray], body: bytes,
                   batching: bool) -> None:
    label = "embedded+batching" if batching else "embedded"
    workdir = bench.workdir / f"{label}-{model}"
    server = ServerProcess.for_models({model: version_dir.parent}, workdir=workdir,
                                      batching=_batching_proto(bench.batching_file) if batching else None,
                                      extra_flags=["--file_system_poll_wait_seconds=0"], timeout=900)
    began = time.perf_counter()
    server.launch()
    try:
        answer = wait_for_answer(server.rest_url, model, body, 900, server.running)
        bench.record(model, label, "cold_start_s", time.perf_counter() - began)
        server.wait_ready()
        bench.references.setdefault(model, answer)
        payload = codec.encode_predict_request(model, inputs, signature_name=codec.DEFAULT_SIGNATURE)
        loads = {"rest": rest_load(server.rest_url, model, body), "grpc": grpc_load(server.grpc_target, payload)}
        _time_points(bench, model, label, server.pid, loads)
        if not batching and model in SDK_MODELS:
            high = HIGH_CONCURRENCY.get(model, 32)
            with GrpcClient(server.grpc_target) as grpc_client, RestClient(server.rest_url) as rest_client:
                for name, client in (("sdk-grpc", grpc_client), ("sdk-rest", rest_client)):
                    point = measure_point(server.pid, sdk_load(client, model, inputs), high, bench.warmups[model],
                                          bench.durations[model])
                    bench.record(model, label, f"point:{name} c={high}", point)
    except (RuntimeError, TimeoutError) as error:
        raise RuntimeError(f"{error}\n--- log tail ---\n{server.log_tail(15)}") from None
    finally:
        server.stop()


def launch_peer(name: str, model: str, version_dir: Path, log_dir: Path
                ) -> tuple[Union[PeerProcess, TFServingContainer], bool]:
    """Start peer ``name`` serving ``version_dir`` (its venv built first if needed); the process, and
    whether its CPU is this machine's process tree (not so for a Docker container)."""
    if name == "tfserving":
        # The image's entrypoint script would add these two flags from MODEL_NAME; the server is called itself.
        flags = [f"--model_name={model}", f"--model_base_path=/models/{model}"]
        try:
            return run_tf_serving(flags, image=tfserving_image(), mounts=[Mount(version_dir.parent,
                                                                                f"/models/{model}")]), False
        except TFServingUnavailable as error:
            raise PeerUnavailable(str(error)) from None
    port, spare = free_port(), free_port()
    spec = PEERS[name]
    venv = ensure_venv(spec)
    peer = PeerProcess(spec.argv(venv, model, str(version_dir), port, spare), port,
                       _clean_env(spec.env(model, str(version_dir))), log_dir / f"{name}-{model}.log")
    peer.launch()
    return peer, True


def _time_peer(bench: Bench, model: str, version_dir: Path, body: bytes, name: str) -> None:
    peer, own_tree = launch_peer(name, model, version_dir, bench.workdir)
    try:
        answer = wait_for_answer(peer.rest_url, model, body, 600, peer.running)
        bench.record(model, name, "cold_start_s", time.perf_counter() - peer.launched_at)
        reference = bench.references.get(model)
        if reference is not None:
            tolerance = load_manifest(version_dir).tolerance
            differs = answers_agree(reference, answer, tolerance.get("atol", 1e-5), tolerance.get("rtol", 1e-4))
            if differs:
                raise RuntimeError(f"answer differs from the embedded server's: {differs}")
        loads = {"rest": rest_load(peer.rest_url, model, body)}
        _time_points(bench, model, name, peer.pid if own_tree else None, loads)
    except (RuntimeError, TimeoutError) as error:
        raise RuntimeError(f"{error}\n--- log tail ---\n{peer.log_tail()}") from None
    finally:
        peer.stop()


def _time_points(bench: Bench, model: str, label: str, pid: Optional[int], loads: Mapping[str, Load]) -> None:
    """c=1 and the model's high concurrency over each protocol; RSS after the first point (the warmup)."""
    high = HIGH_CONCURRENCY.get(model, 32)
    points = [(protocol, load, concurrency) for protocol, load in loads.items() for concurrency in (1, high)]
    for index, (protocol, load, concurrency) in enumerate(points):
        point = measure_point(pid, load, concurrency, bench.warmups[model], bench.durations[model])
        bench.record(model, label, f"point:{protocol} c={concurrency}", point)
        logger.info("%s %s %s c=%d: %.1f req/s, p50 %s ms, %s CPU-ms/req, %d errors", model, label, protocol,
                    concurrency, point["rps"], _fmt(point["p50_ms"]), _fmt(point["cpu_ms"], 2), point["errors"])
        if index == 0 and pid is not None:
            bench.record(model, label, "rss_mb", tree_rss_mb(pid))
            bench.record(model, label, "rss_anon_mb", tree_rss_anon_mb(pid))


def _time_in_process(bench: Bench, model: str, version_dir: Path) -> None:
    cores = len(os.sched_getaffinity(0))
    points = measure_in_process(model, version_dir, bench.durations[model], (1, 8), (1, cores))
    entry = bench.measurements.setdefault("in_process", {}).setdefault(model, {})
    for point in points:
        entry.setdefault(f"b{point.load} t{point.batching.lstrip('t')}", []).append(point.rows_per_s)


# ---------------------------------------------------------------------------- report (pure)

def _fmt(value: Optional[float], digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _median(values: Sequence[Optional[float]]) -> Optional[float]:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _spread_pct(values: Sequence[Optional[float]]) -> Optional[float]:
    """Half the range over the median, %: the ±x of a figure measured over several rounds."""
    present = [v for v in values if v is not None]
    middle = _median(present)
    if len(present) < 2 or not middle:
        return None
    return (max(present) - min(present)) / 2 / middle * 100


def _points(m: dict, model: str, server: str, key: str) -> list[dict]:
    return m.get("servers", {}).get(model, {}).get(server, {}).get("points", {}).get(key, [])


def _metric(m: dict, model: str, server: str, key: str, metric: str = "rps") -> Optional[float]:
    return _median([p.get(metric) for p in _points(m, model, server, key)])


def _paired_ratio(m: dict, model: str, a: tuple[str, str], b: tuple[str, str], metric: str = "rps") -> Optional[float]:
    """Median over rounds of ``a / b`` (each a (server, point key)), each round's two figures side by side."""
    first, second = _points(m, model, *a), _points(m, model, *b)
    ratios = [x[metric] / y[metric] for x, y in zip(first, second)
              if x.get(metric) is not None and y.get(metric)]
    return _median(ratios)


def _high(model: str) -> int:
    return HIGH_CONCURRENCY.get(model, 32)


def evaluate(m: dict) -> tuple[list[Target], list[Target], list[str]]:
    """The speed targets from a measurements dict: (targets, stretch targets, targets not measured)."""
    targets: list[Target] = []
    unmeasured: list[str] = []

    def check(name: str, value: Optional[float], limit: float, higher: bool = True, unit: str = "x") -> None:
        if value is None:
            unmeasured.append(name)
        else:
            targets.append(Target(name, value, limit, higher_is_better=higher, unit=unit))

    image, small = "resnet50", "digits"
    check(f"{image} REST c=1 / today's {TODAY_RESNET50_REST_C1} req/s (before the REST work)",
          None if _metric(m, image, "embedded", "rest c=1") is None
          else _metric(m, image, "embedded", "rest c=1") / TODAY_RESNET50_REST_C1, 2.0)
    check(f"{image} REST c=1 / embedded gRPC c=1 (req/s)",
          _paired_ratio(m, image, ("embedded", "rest c=1"), ("embedded", "grpc c=1")), 0.6)
    high = _high(small)
    check(f"{small} c={high} server CPU per request, gRPC / REST (no batching)",
          _paired_ratio(m, small, ("embedded", f"grpc c={high}"), ("embedded", f"rest c={high}"), "cpu_ms"),
          1.0, higher=False)
    check(f"{small} c={high} SDK GrpcClient / RestClient (req/s)",
          _paired_ratio(m, small, ("embedded", f"sdk-grpc c={high}"), ("embedded", f"sdk-rest c={high}")), 1.0)
    timeout_ms = m.get("settings", {}).get("batch_timeout_micros", 0) / 1e3
    for protocol in ("rest", "grpc"):
        check(f"{small} {protocol} c={high} batching on / off (req/s)",
              _paired_ratio(m, small, ("embedded+batching", f"{protocol} c={high}"),
                            ("embedded", f"{protocol} c={high}")), 1.0)
        on, off = _metric(m, small, "embedded+batching", f"{protocol} c=1", "p50_ms"), \
            _metric(m, small, "embedded", f"{protocol} c=1", "p50_ms")
        check(f"{small} {protocol} c=1 p50 added by batching (limit: batch_timeout {timeout_ms:g} ms + 0.5 ms)",
              None if on is None or off is None else on - off, timeout_ms + 0.5, higher=False, unit=" ms")
    check(f"{image} gRPC c={_high(image)} batching on / off (req/s)",
          _paired_ratio(m, image, ("embedded+batching", f"grpc c={_high(image)}"),
                        ("embedded", f"grpc c={_high(image)}")), 1.1)
    for model in m.get("servers", {}):
        peers = {s: _median(v.get("rss_mb", [])) for s, v in m["servers"][model].items()
                 if not s.startswith("embedded")}
        best = min((v for v in peers.values() if v is not None), default=None)
        own = _median(m["servers"][model].get("embedded", {}).get("rss_mb", []))
        check(f"{model} embedded RSS - best peer's (MB)", None if best is None or own is None else own - best,
              50.0, higher=False, unit=" MB")
    stretch: list[Target] = []
    served = max((v for v in (_metric(m, small, "embedded", f"{p} c={high}") for p in ("rest", "grpc"))
                  if v is not None), default=None)
    local = _median(m.get("in_process", {}).get(small, {}).get(f"b1 t{m.get('machine', {}).get('cores', 2)}", []))
    if served is not None and local:
        stretch.append(Target(f"{small} served c={high} (best protocol, no batching) / in-process batch 1 (rows/s)",
                              served / local, 0.4))
    return targets, stretch, unmeasured


def exit_code(m: dict) -> int:
    """1 when a target was measured and missed (stretch targets and unmeasured ones never fail)."""
    targets, _, _ = evaluate(m)
    return 0 if all(t.passed for t in targets) else 1


def _server_rows(m: dict, model: str) -> list[str]:
    servers = m.get("servers", {}).get(model, {})
    keys = sorted({k for s in servers.values() for k in s.get("points", {})},
                  key=lambda k: (k.split()[0] != "rest", k.split()[0], int(k.split("=")[1])))
    head = f"{'server':<18}" + "".join(f"{k:>22}" for k in keys) + f"{'cold start s':>14}{'RSS MB':>9}{'anon MB':>9}"
    lines = [f"{model}: req/s (p50 ms) ±spread over rounds; CPU-ms per request on the line below", head,
             "-" * len(head)]
    for server, entry in servers.items():
        rates, cpus = [], []
        for key in keys:
            points = entry.get("points", {}).get(key, [])
            rps, p50 = _median([p["rps"] for p in points]), _median([p["p50_ms"] for p in points])
            spread = _spread_pct([p["rps"] for p in points])
            cell = "" if rps is None else f"{rps:.1f} ({_fmt(p50)})" + (f" ±{spread:.0f}%" if spread else "")
            rates.append(f"{cell:>22}")
            cpu = _median([p["cpu_ms"] for p in points])
            cpus.append(f"{'' if cpu is None else f'{cpu:.2f} ms':>22}")
        lines.append(f"{server:<18}{''.join(rates)}{_fmt(_median(entry.get('cold_start_s', []))):>14}"
                     f"{_fmt(_median(entry.get('rss_mb', [])), 0):>9}{_fmt(_median(entry.get('rss_anon_mb', [])), 0):>9}")
        lines.append(f"{'  CPU/request':<18}{''.join(cpus)}")
        errors = {key: sum(p.get("errors", 0) for p in entry.get("points", {}).get(key, [])) for key in keys}
        if any(errors.values()):
            lines.append(f"{'  failed requests':<18}" + "".join(f"{n or '':>22}" for n in errors.values()))
    return lines


def _ratio_rows(m: dict, model: str) -> list[str]:
    servers = m.get("servers", {}).get(model, {})
    lines = []
    for key in ("rest c=1", f"rest c={_high(model)}"):
        parts = [f"{peer} {ratio:.2f}x" for peer in servers if not peer.startswith("embedded")
                 for ratio in [_paired_ratio(m, model, ("embedded", key), (peer, key))] if ratio is not None]
        if parts:
            lines.append(f"  embedded / peer, {key} (req/s): " + ", ".join(parts))
    local = m.get("in_process", {}).get(model, {})
    cores = m.get("machine", {}).get("cores", 2)
    pairs = (("rest c=1", "b1 t1"), ("grpc c=1", "b1 t1"), (f"rest c={_high(model)}", f"b1 t{cores}"),
             (f"grpc c={_high(model)}", f"b1 t{cores}"))
    for key, where in pairs:
        for server in ("embedded", "embedded+batching"):
            served, ceiling = _metric(m, model, server, key), _median(local.get(where, []))
            if served is not None and ceiling:
                lines.append(f"  {server} {key} / in-process {where}: {served:.1f} / {ceiling:.1f} = "
                             f"{served / ceiling:.2f}")
    return lines


def comparable_series(measurements: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The points in ``python -m loadtest compare``'s generic shape: one series per model and server
    (``digits/embedded``), one level per point (``rest c=32``), each round a sample. Pure."""
    series = []
    for model, servers in measurements.get("servers", {}).items():
        for server, record in servers.items():
            levels = []
            for point, rounds in record.get("points", {}).items():
                samples = [{"throughput_rps": r["rps"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"]}
                           for r in rounds if r.get("requests")]
                if samples:
                    levels.append({"level": point, "rounds": samples})
            if levels:
                series.append({"label": f"{model}/{server}", "levels": levels})
    return series


def render(m: dict) -> str:
    """The report of a measurements dict (``--json``'s content): tables, ratios, targets. Pure."""
    machine, settings = m.get("machine", {}), m.get("settings", {})
    lines = [(f"machine: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, "
              f"Python {machine.get('python', '?')}; 1-min load {_fmt(machine.get('load_before'))} before, "
              f"{_fmt(machine.get('load_after'))} after"),
             (f"command: {settings.get('command', '?')}; {settings.get('rounds', '?')} interleaved rounds, "
              f"every server restarted each round; batching: {settings.get('batching_file', '?')}"), ""]
    for name, reason in m.get("skipped", {}).items():
        lines.append(f"SKIPPED {name}: {reason.splitlines()[0] if reason else ''}")
    for model in m.get("servers", {}):
        lines += [""] + _server_rows(m, model)
        local = m.get("in_process", {}).get(model, {})
        if local:
            lines.append("in-process (Session callable, rows/s): " + ", ".join(
                f"{k} {_median(v):.1f}" + (f" ±{_spread_pct(v):.0f}%" if _spread_pct(v) else "")
                for k, v in local.items()))
        lines += _ratio_rows(m, model)
    targets, stretch, unmeasured = evaluate(m)
    lines.append("")
    for t in targets:
        sign = ">=" if t.higher_is_better else "<="
        lines.append(f"{'PASS' if t.passed else 'FAIL'}  {t.name}: {t.ratio:.2f}{t.unit} "
                     f"(target {sign} {t.limit}{t.unit})")
    for t in stretch:
        lines.append(f"{'MET ' if t.passed else 'NOT MET'}  stretch: {t.name}: {t.ratio:.2f} (target >= {t.limit})")
    for name in unmeasured:
        lines.append(f"SKIP  {name}: not measured in this run")
    failed = [t.name for t in targets if not t.passed]
    lines.append(f"missed targets: {'; '.join(failed)}" if failed else "every measured target met")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- main

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="digits,resnet50",
                        help="comma-separated models to serve (from --model-repo)")
    parser.add_argument("--model-repo", type=Path, default=REPO_ROOT / "models", metavar="DIR",
                        help="model repository; models without a version are exported there first "
                             "(default: <checkout>/models)")
    parser.add_argument("--peers", default=",".join([*PEERS, "tfserving"]),
                        help=f"comma-separated peers among {', '.join([*PEERS, 'tfserving'])} ('' for none)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (every server restarted each)")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds timed per point")
    parser.add_argument("--resnet50-duration", type=float, default=8.0, help="seconds timed per point, resnet50")
    parser.add_argument("--warmup", type=float, default=1.0,
                        help="seconds of load before each timed window (resnet50: at least half its duration, "
                             "as one of its requests takes seconds under load)")
    parser.add_argument("--batching-config", type=Path, default=REPO_ROOT / "serving" / "batching.cpu.config",
                        help="BatchingParameters of the batching server (default: serving/batching.cpu.config)")
    parser.add_argument("--quick", action="store_true",
                        help="one short round: checks that everything runs, measures nothing reliable")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the measurements as JSON")
    parser.add_argument("--render", type=Path, metavar="JSON",
                        help="print the report of a recorded run (--json's file), measure nothing")
    return parser


def _machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or "?")
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "python": platform.python_version(),
            "load_before": os.getloadavg()[0]}


def main(argv: Optional[Sequence[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s] %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request would cost the client CPU
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # finally blocks stop the servers
    args = build_parser().parse_args(argv)
    if args.render:
        measurements = json.loads(args.render.read_text())
        print(render(measurements))
        return exit_code(measurements)
    models = [m for m in args.models.split(",") if m]
    peers = [p for p in args.peers.split(",") if p]
    unknown = [p for p in peers if p not in PEERS and p != "tfserving"]
    if unknown:
        build_parser().error(f"unknown peers {unknown}; choose among {', '.join([*PEERS, 'tfserving'])}")
    if args.quick:
        args.rounds, args.duration, args.resnet50_duration, args.warmup = 1, 1.0, 3.0, 0.5
    repo = args.model_repo.resolve()
    for model in models:
        ensure_model(model, out=repo)
    timeout_us = _batching_proto(args.batching_config).batch_timeout_micros.value
    measurements: dict = {"machine": _machine(), "settings": {
        "command": "python -m benchmarks.peers " + " ".join(sys.argv[1:] if argv is None else argv),
        "rounds": args.rounds, "models": models, "peers": peers, "duration_s": args.duration,
        "resnet50_duration_s": args.resnet50_duration, "warmup_s": args.warmup,
        "batching_file": str(args.batching_config), "batch_timeout_micros": timeout_us}}
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        warmups = {m: max(args.warmup, args.resnet50_duration / 2) if m in LARGE_MODELS else args.warmup
                   for m in models}
        bench = Bench(repo, models, peers, args.batching_config, warmups,
                      {m: args.resnet50_duration if m in LARGE_MODELS else args.duration for m in models},
                      Path(tmp), measurements)
        for round_index in range(args.rounds):
            print(f"round {round_index + 1}/{args.rounds}", flush=True)
            run_round(bench, round_index)
    measurements["machine"]["load_after"] = os.getloadavg()[0]
    if args.json:
        args.json.write_text(json.dumps({**measurements, "series": comparable_series(measurements)}, indent=1))
    print(render(measurements))
    return exit_code(measurements)


if __name__ == "__main__":
    sys.exit(main())
