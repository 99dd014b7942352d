"""What request capture at the gateway costs it: throughput and p50 with capture off, at 10 %, at 100 %, and with
the capture service stopped and stalled, side by side in one run.

Runs with no Docker engine: Debian's nginx on the host with the repository's gateway templates
(rendered for its version, as tests/gateway does), in front of the embedded server with ``digits``,
and the capture service (``python -m serving.capture.gateway_sink``) as a local process. Each
configuration is a fresh nginx (``GATEWAY_CAPTURE`` on/off) and a fresh capture service; the loads
(REST and gRPC Predict, TLS and an API key, keep-alive connections, concurrency 1 and 32) run in
interleaved rounds, so the machine's drift hits every configuration alike. It prints, per load,
req/s, p50 and failed requests per configuration, the ratio to capture off, the records each
capture wrote against ``floor(n x rate)``, and the load average.

    python -m benchmarks.capture_gateway --model-repo models      # make bench; --seconds, --rounds to change

Stopped: nothing listens on the capture port (nginx gets a refused connection, then marks the service
down for GATEWAY_CAPTURE_FAIL_TIMEOUT). Stalled: the service is SIGSTOPped (as ``docker pause``
freezes it): the kernel still accepts connections, nothing answers, each copy waits out
GATEWAY_CAPTURE_TIMEOUT, and after three such failures it is marked down.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from serving.checkout import REPO_ROOT

__all__ = ["LoadResult", "SinkProcess", "drive", "main", "predict_bodies"]

MODEL = "digits"


class SinkProcess:
    """The capture service as a local process on ``port``: start, stop, SIGSTOP/SIGCONT, its counters."""

    def __init__(self, port: int, capture_dir: Path, rest_url: str, rate: str, log: Path,
                 extra: Sequence[str] = ()) -> None:
        self.port, self.capture_dir, self.rest_url, self.rate, self.log = port, Path(capture_dir), rest_url, rate, log
        self.extra = list(extra)
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> SinkProcess:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "serving.capture.gateway_sink", f"--listen=127.0.0.1:{self.port}",
                 f"--rest={self.rest_url}", f"--capture-dir={self.capture_dir}", f"--rate={self.rate}", *self.extra],
                stdout=out, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError):
                self.get("/healthz")
                return self
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the capture service did not start:\n{self.log.read_text()[-3000:]}")
            threading.Event().wait(0.1)

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as answer:
            return json.loads(answer.read())

    def stats(self) -> dict:
        return self.get("/stats")

    def settled_stats(self, timeout: float = 30.0) -> dict:
        """The counters once the writer's queue is empty and no copy arrived for 0.5 s."""
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            now = self.stats()
            if last == now and now["queued_bytes"] == 0:
                return now
            last = now
            threading.Event().wait(0.5)
        return self.stats()

    def pause(self) -> None:
        assert self.proc is not None   # started
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None   # started
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class LoadResult:
    ok: int = 0
    failed: int = 0
    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies) * 1000 if self.latencies else float("nan")


def predict_bodies(images=None) -> tuple[list[bytes], list]:
    """digits Predict requests, one per row of ``images`` (default: one synthetic image), as REST bodies
    and gRPC PredictRequests."""
    import numpy as np

    from serving import codec
    from serving.wire import apis

    if images is None:
        images = (np.arange(28 * 28, dtype=np.float32).reshape(1, 28, 28, 1) % 255) / 255.0
    rest, grpc_requests = [], []
    for row in np.asarray(images, dtype=np.float32):
        batch = row[np.newaxis]
        rest.append(codec.json_dumps({"instances": batch.tolist()}))
        request = apis.PredictRequest()
        request.model_spec.name = MODEL
        codec.ndarray_to_tensor_proto(batch, request.inputs["images"])
        grpc_requests.append(request)
    return rest, grpc_requests


def drive(protocol: str, *, rest_url: str, grpc_target: str, ca: Path, api_key: str, concurrency: int,
          seconds: float | None = None, requests: int | None = None, rate: float | None = None,
          images=None) -> LoadResult:
    """Predict requests through the gateway on ``concurrency`` keep-alive connections, for ``seconds`` or
    ``requests`` in all; ``rate`` (requests/s over all connections) paces them (open schedule per
    connection, late requests sent at once); the rows of ``images`` are sent in turn, one per request.
    Counts answers and failures (any non-200 / non-OK)."""
    import grpc
    import httpx

    from serving.wire import apis

    rest_bodies, grpc_requests = predict_bodies(images)
    result, lock = LoadResult(), threading.Lock()
    counter = iter(range(requests)) if requests is not None else None
    started = time.monotonic()
    stop_at = started + seconds if seconds is not None else float("inf")
    interval = concurrency / rate if rate else 0.0

    def take() -> bool:
        if time.monotonic() >= stop_at:
            return False
        if counter is not None:
            with lock:
                return next(counter, None) is not None
        return True

    def worker(index: int) -> None:
        latencies: list[float] = []
        errors: list[str] = []
        ok, failed = 0, 0
        sent = index
        due = started + (index * interval / concurrency if interval else 0.0)
        if protocol == "rest":
            client = httpx.Client(verify=str(ca), timeout=30.0, headers={"x-api-key": api_key})
            url = f"{rest_url}/v1/models/{MODEL}:predict"

            def call() -> None:
                answer = client.post(url, content=rest_bodies[sent % len(rest_bodies)],
                                     headers={"content-type": "application/json"})
                if answer.status_code != 200:
                    raise RuntimeError(f"HTTP {answer.status_code}: {answer.text[:200]}")
        else:
            channel = grpc.secure_channel(grpc_target, grpc.ssl_channel_credentials(Path(ca).read_bytes()))
            predict = channel.unary_unary("/tensorflow.serving.PredictionService/Predict",
                                          request_serializer=apis.PredictRequest.SerializeToString,
                                          response_deserializer=apis.PredictResponse.FromString)

            def call() -> None:
                predict(grpc_requests[sent % len(grpc_requests)], metadata=[("x-api-key", api_key)], timeout=30)
        try:
            while take():
                if interval:
                    wait = due - time.monotonic()
                    if wait > 0:
                        threading.Event().wait(wait)
                    due += interval
                t0 = time.perf_counter()
                sent += concurrency
                try:
                    call()
                    ok += 1
                    latencies.append(time.perf_counter() - t0)
                except Exception as exc:  # noqa: BLE001 - every failure counts; the first few are kept to show
                    failed += 1
                    if len(errors) < 3:
                        errors.append(str(exc)[:300])
        finally:
            (client if protocol == "rest" else channel).close()
            with lock:
                result.ok += ok
                result.failed += failed
                result.latencies += latencies
                result.errors += errors

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.seconds = time.monotonic() - started
    return result


# -- the benchmark -------------------------------------------------------------------------------------
CONFIGS = ("off", "10%", "100%", "slow", "stopped", "stalled")
SLOW_ANSWER_MS = 50


class SlowService:
    """A capture port that answers each copy 204 after ``delay`` seconds (a slow but live service, below
    GATEWAY_CAPTURE_TIMEOUT): shows what nginx's wait for a request's copies costs a keep-alive client."""

    def __init__(self, port: int, delay: float) -> None:
        import asyncio

        self.port, self.delay = port, delay
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _client(self, reader, writer) -> None:
        import asyncio

        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                await asyncio.sleep(self.delay)
                writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def _run(self) -> None:
        import asyncio

        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", self.port))
        self._ready.set()
        self._loop.run_forever()

    def start(self) -> SlowService:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@contextlib.contextmanager
def _gateway(nginx: str, version, values: dict, root: Path) -> Iterator[dict]:
    from gateway import render_templates
    from serving.launcher import port_open

    conf = render_templates(values, root / "conf", nginx_version=version)
    run = root / "run"
    run.mkdir(parents=True, exist_ok=True)
    command = [nginx, "-p", f"{run}/", "-e", "stderr", "-c", str(conf)]
    if os.geteuid() == 0:
        import pwd
        command += ["-g", f"user {pwd.getpwuid(os.geteuid()).pw_name};"]
    access = open(root / "access.log", "wb")  # noqa: SIM115 - nginx writes it until the context ends
    errors = open(root / "error.log", "wb")  # noqa: SIM115 - as the access log
    proc = subprocess.Popen(command, stdout=access, stderr=errors, stdin=subprocess.DEVNULL)
    ports = [int(values[k].rsplit(":", 1)[1]) for k in ("GATEWAY_GRPC_LISTEN", "GATEWAY_REST_LISTEN")]
    deadline = time.monotonic() + 20
    while not all(port_open(p) for p in ports):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((root / "error.log").read_text())
        threading.Event().wait(0.1)
    try:
        yield values
    finally:
        proc.send_signal(signal.SIGQUIT)
        proc.wait(20)
        access.close()
        errors.close()


def _compose_gateway_env() -> dict[str, str]:
    """The compose gateway service's GATEWAY_* values (compose's own model of the CPU files and .env)."""
    from serving.config.compose import load_compose_model, with_grafana_placeholder

    files = [REPO_ROOT / "docker-compose.yml", REPO_ROOT / "docker-compose.cpu.yml"]
    env = with_grafana_placeholder({k: v for k, v in os.environ.items() if k != "COMPOSE_PROFILES"})
    model = load_compose_model(files, services=["gateway"], env=env)
    return {k: str(v) for k, v in model["services"]["gateway"]["environment"].items() if k.startswith("GATEWAY_")}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.capture_gateway", description=__doc__.split("\n")[0])
    parser.add_argument("--model-repo", type=Path, default=REPO_ROOT / "models")
    parser.add_argument("--seconds", type=float, default=4.0, help="per load, per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--protocols", default="rest,grpc")
    parser.add_argument("--concurrency", default="1,32")
    args = parser.parse_args(argv)

    import shutil

    from gateway import installed_nginx_version
    from gateway.certs import init_secrets
    from serving.launcher import ServerProcess, free_port

    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    version = installed_nginx_version(nginx)
    protocols = args.protocols.split(",")
    levels = [int(c) for c in args.concurrency.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-capture-"))
    secrets = init_secrets(work / "secrets")
    base = _compose_gateway_env()
    results: dict[tuple, list[LoadResult]] = {}
    sink_counts: dict[str, list[tuple[int, ...]]] = {}   # offered, written, kept; then the access log's count
    load0 = os.getloadavg()
    print(f"capture benchmark: host nginx {'.'.join(map(str, version))} (repo templates) -> embedded server "
          f"({MODEL}), capture service as a local process; {args.rounds} rounds x {args.seconds:.0f} s per load; "
          f"TLS + API key, keep-alive", flush=True)
    with ServerProcess.for_models({MODEL: args.model_repo / MODEL}, workdir=work / "server") as server:
        rest_up = f"http://127.0.0.1:{server.rest_port}"
        for round_no in range(args.rounds):
            for config in CONFIGS:
                sink_port = free_port()
                ports = {k: free_port() for k in ("grpc", "rest", "mtls")}
                values = {**base, "GATEWAY_GRPC_LISTEN": f"127.0.0.1:{ports['grpc']}",
                          "GATEWAY_REST_LISTEN": f"127.0.0.1:{ports['rest']}",
                          "GATEWAY_MTLS_LISTEN": f"127.0.0.1:{ports['mtls']}",
                          "GATEWAY_GRPC_UPSTREAM": server.grpc_target, "GATEWAY_REST_UPSTREAM": f"127.0.0.1:{server.rest_port}",
                          "GATEWAY_RESOLVER": "127.0.0.1", "GATEWAY_SECRETS_DIR": str(secrets.directory),
                          "GATEWAY_RATE": "1000000r/s", "GATEWAY_BURST": "1000000",
                          "GATEWAY_CAPTURE": "off" if config == "off" else "on",
                          "GATEWAY_CAPTURE_UPSTREAM": f"127.0.0.1:{sink_port}"}
                root = work / f"r{round_no}-{config.strip('%')}"
                values["GATEWAY_RUN_DIR"] = str(root / "run")
                sink = None
                slow = SlowService(sink_port, SLOW_ANSWER_MS / 1000).start() if config == "slow" else None
                if config in ("10%", "100%", "stalled"):
                    sink_rate = {"10%": "0.1", "100%": "1"}.get(config, "1")
                    sink = SinkProcess(sink_port, root / "capture", rest_up, sink_rate, work / f"sink-{round_no}-{config.strip('%')}.log")
                    (root / "capture").mkdir(parents=True, exist_ok=True)
                    sink.start()
                    if config == "stalled":
                        sink.pause()
                try:
                    with _gateway(nginx, version, values, root):
                        for protocol in protocols:
                            for c in levels:
                                res = drive(protocol, rest_url=f"https://127.0.0.1:{ports['rest']}",
                                            grpc_target=f"127.0.0.1:{ports['grpc']}", ca=secrets.ca_cert,
                                            api_key=secrets.api_key("client"), concurrency=c, seconds=args.seconds)
                                results.setdefault((protocol, c, config), []).append(res)
                                if res.errors:
                                    print(f"  {config} {protocol} c={c}: {res.failed} failed, e.g. {res.errors[0]}")
                        if sink is not None and config != "stalled":
                            stats = sink.settled_stats()
                            sink_counts.setdefault(config, []).append((stats["offered"], stats["written"],
                                                                       stats["kept"]))
                    logged = sum(1 for line in (root / "access.log").read_text().splitlines()
                                 if ":predict" in line or "/Predict" in line)
                    if sink is not None and config != "stalled":
                        sink_counts[config][-1] = (*sink_counts[config][-1], logged)
                finally:
                    if sink is not None:
                        sink.stop()
                    if slow is not None:
                        slow.stop()
    load1 = os.getloadavg()
    print()
    print(f"slow: a capture port answering each copy after {SLOW_ANSWER_MS} ms (below CAPTURE_MIRROR_TIMEOUT, 1 s); "
          "stopped: nothing listens; stalled: the capture service SIGSTOPped")
    header = f"{'load':<12}" + "".join(f"{c:>26}" for c in CONFIGS)
    print(header)
    print(f"{'':<12}" + "".join(f"{'req/s  p50ms  fail  x off':>26}" for _ in CONFIGS))
    for protocol in protocols:
        for c in levels:
            cells = []
            off = statistics.median(r.rate for r in results[(protocol, c, "off")])
            for config in CONFIGS:
                runs = results[(protocol, c, config)]
                rate = statistics.median(r.rate for r in runs)
                p50 = statistics.median(r.p50_ms for r in runs)
                failed = sum(r.failed for r in runs)
                cells.append(f"{rate:7.0f} {p50:6.2f} {failed:5d} {rate / off:5.2f}x")
            print(f"{protocol + ' c=' + str(c):<12}" + "".join(f"{cell:>26}" for cell in cells))
    print()
    for config, counts in sink_counts.items():
        share = {"10%": 0.1, "100%": 1.0}[config]
        for offered, written, _kept, logged in counts:
            print(f"capture {config}: the gateway logged {logged} Predict requests, {offered} copies reached the "
                  f"capture service, {written} records written, floor(n x {share}) = {int(offered * share)}")
    total_failed = sum(r.failed for runs in results.values() for r in runs)
    print(f"failed client requests in all configurations: {total_failed}")
    print(f"load average (1, 5, 15 min) before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}; "
          f"after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} ({os.cpu_count()} cores)")
    shutil.rmtree(work, ignore_errors=True)
    return 1 if total_failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
