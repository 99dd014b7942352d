"""Before/after rows for the gRPC port's attacks: stalled streams, idle connections, 4x overload, SIGTERM.

``python -m tests.support.security.grpc_table [--checkout DIR]`` starts the embedded
server of ``DIR``'s ``serving`` package (default: this checkout; flags an older
checkout does not know are logged and ignored) and prints one row per case:
sent, client-error and server-error statuses, crash, hang (no answer within
the case's window), failed good requests (an error or over 1 s), the
server's peak and retained RSS growth (MB), descriptors before/peak/after, and
how many calls came back CANCELLED (also counted as server errors).

- ``stall-8``: 8 real gRPC calls whose message never comes (headers sent, the
  request iterator blocks), no deadline; watched for 8 s.
- ``stall-300``: the same with 300 calls on 3 channels.
- ``idle-conns``: 1100 idle TCP connections that send the HTTP/2 preface,
  with the server's RLIMIT_NOFILE lowered to 1100 after start; a fresh
  channel's call and a REST status call count as good requests too.
- ``overload``: tests/security/test_overload.py's shape (napping model, 4x
  saturation, 10 s, one channel) with the server's default flags and no
  batching; ``overload-batch`` the same with batching (``max_batch_size`` 2);
  ``overload-32`` with batching and ``--grpc_max_concurrent_rpcs=32`` (the
  test's own bound). Failed good: calls neither answered OK nor refused
  (RESOURCE_EXHAUSTED, UNAVAILABLE).
- ``overload-procs``: ``CLIENT_PROCESSES`` client processes, one channel each,
  together at 4x the closed-loop saturation of the cheap ``serving_default``
  signature (CPU-bound: the clients and the server share the host's cores, so
  grpcio's polling thread falls behind and calls wait in gRPC core), default
  flags, batching (``max_batch_size`` 32), 10 s.
- ``sigterm``: 16 connections each sending a call every 10 ms (open loop, as a
  client that does not stop on errors); after 48 answers SIGTERM, sending on until
  the process has exited. Crash: a non-zero exit status; hang: calls never
  answered; failed good: calls in flight at SIGTERM answered neither OK nor
  with a refusal (RESOURCE_EXHAUSTED, UNAVAILABLE);
  retained RSS: none (the process is gone).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Optional, Sequence

import grpc

from serving import wire
from tests.support.security.attacks import GoodProbe, ServerMemory, Stub, good_request, napping_repo, python_internals
from tests.support.security.grpc_stall import idle_connections
from tests.support.load import open_loop, saturation, until_exit
from tests.support.security.models import MODEL, nap_request

__all__ = ["main", "processes_load"]

CLIENT_ERRORS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.NOT_FOUND,
                 grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.FAILED_PRECONDITION,
                 grpc.StatusCode.UNAVAILABLE}
AFTER_FLAGS = ("--grpc_read_timeout_seconds=2",)
HEADER = (f"{'case':<14} {'sent':>5} {'4xx':>5} {'5xx':>5} {'crash':>5} {'hang':>5} {'failed good':>11} "
          f"{'peak RSS+MB':>11} {'kept RSS+MB':>11} {'fds b/peak/a':>14} {'CANCELLED':>9}  codes")
REFUSALS = {"OK", "RESOURCE_EXHAUSTED", "UNAVAILABLE"}
SIGTERM_CHANNELS = 16
SIGTERM_PERIOD = 0.01
SIGTERM_BATCHING = {"max_batch_size": 4, "batch_timeout_micros": 0, "num_batch_threads": 2}   # test_sigterm's


def _server(checkout: Optional[Path], workdir: Path, flags: Sequence[str], batching=None):
    """``batching``: None for the attacks' default batching, ``{}`` for none."""
    from benchmarks.grpc_admission import CheckoutServer
    repo = napping_repo(workdir / "models")
    if batching is None:
        batching = {"max_batch_size": 32, "batch_timeout_micros": 1000, "num_batch_threads": 2}
    server = CheckoutServer.for_models({MODEL: repo / MODEL}, workdir=workdir / "server",
                                       batching=batching or None, extra_flags=[*AFTER_FLAGS, *flags])
    server.root = checkout
    return server.start()


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _after(server, memory: ServerMemory) -> tuple[bool, int, int, int]:
    """Whether the server died, its peak RSS (kB), its RSS a second later, and its descriptors then."""
    if not server.running():
        return True, 0, 0, 0
    peak = memory.field("VmHWM")
    time.sleep(1)   # a pause for the kernel's counts to settle, not an ordering of threads
    return False, peak, memory.field("VmRSS"), _fds(server.pid)


def _row(name, sent, codes, crashed, hangs, failed_good, peak_kb, kept_kb, fds, leaks) -> str:
    client_errors = {x.name for x in CLIENT_ERRORS} | {"refused"}   # a connection closed at accept: a refusal
    four = sum(n for c, n in codes.items() if c in client_errors)
    five = sum(n for c, n in codes.items() if c != "OK" and c not in client_errors)
    text = ",".join(f"{c}:{n}" for c, n in sorted(codes.items()))
    return (f"{name:<14} {sent:>5} {four:>5} {five:>5} {int(crashed):>5} {hangs:>5} {failed_good:>11} "
            f"{peak_kb / 1024:>11.0f} {kept_kb / 1024:>11.0f} {'/'.join(map(str, fds)):>14} "
            f"{codes.get('CANCELLED', 0):>9}  {text}{'  PYTHON TEXT' if leaks else ''}")


def stall_case(server, name: str, calls: int, channels: int) -> str:
    memory = ServerMemory(server.pid)
    release = threading.Event()
    with grpc.insecure_channel(server.grpc_target) as good_channel:
        stub = Stub(good_channel)
        stub.Predict(good_request(), timeout=10)
        before_kb, fds_before = memory.field("VmRSS"), _fds(server.pid)
        memory.reset_peak()
        # each attack channel its own connection (not the subchannel the good probe's channel shares)
        attack = [grpc.insecure_channel(server.grpc_target, options=[("grpc.use_local_subchannel_pool", 1)])
                  for _ in range(channels)]

        def messages():
            release.wait(60)
            return
            yield b""

        with GoodProbe(stub) as probe:
            futures = [attack[i % channels].stream_unary(wire.PREDICT).future(messages()) for i in range(calls)]
            end = time.monotonic() + 8
            for future in futures:
                try:
                    future.exception(max(0.0, end - time.monotonic()))
                except grpc.FutureTimeoutError:
                    pass
            peak_fds = _fds(server.pid)
            codes: dict[str, int] = {}
            hangs = leaks = 0
            for future in futures:
                if not future.done():
                    hangs += 1
                    continue
                error = future.exception()
                code = "OK" if error is None else error.code().name
                codes[code] = codes.get(code, 0) + 1
                leaks += bool(error is not None and python_internals(error.details() or ""))
            release.set()
            for channel in attack:
                channel.close()
        crashed, peak, kept, fds_after = _after(server, memory)
    for failure in probe.failures[:3]:
        print(f"  {name} good failure: {failure}", file=sys.stderr)
    return _row(name, calls, codes, crashed, hangs, len(probe.failures), peak - before_kb, kept - before_kb,
                (fds_before, peak_fds, fds_after), leaks)


def idle_case(server, count: int = 1100, nofile: int = 1100) -> str:
    memory = ServerMemory(server.pid)
    resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (nofile, nofile))
    port = int(server.grpc_target.rsplit(":", 1)[1])
    with grpc.insecure_channel(server.grpc_target) as good_channel:
        stub = Stub(good_channel)
        stub.Predict(good_request(), timeout=10)
        before_kb, fds_before = memory.field("VmRSS"), _fds(server.pid)
        memory.reset_peak()
        failed = 0
        with GoodProbe(stub) as probe:
            sockets = idle_connections("127.0.0.1", port, count)
            time.sleep(0.5)
            peak_fds = _fds(server.pid)
            with grpc.insecure_channel(server.grpc_target, options=[("grpc.use_local_subchannel_pool", 1)]) as fresh:
                try:
                    Stub(fresh).Predict(good_request(), timeout=5)
                except grpc.RpcError:
                    failed += 1
            try:
                urllib.request.urlopen(f"{server.rest_url}/v1/models/{MODEL}", timeout=5).read()
            except OSError:
                failed += 1
        refused = 0
        for sock in sockets:
            sock.setblocking(False)
            try:
                while sock.recv(65536):
                    pass
                refused += 1
            except BlockingIOError:
                pass
            except OSError:
                refused += 1
            sock.close()
        crashed, peak, kept, fds_after = _after(server, memory)
    return _row("idle-conns", count, {"refused": refused} if refused else {}, crashed, 0,
                failed + len(probe.failures), peak - before_kb, kept - before_kb,
                (fds_before, peak_fds, fds_after), 0)


def overload_case(server, name: str) -> str:
    memory = ServerMemory(server.pid)
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = Stub(channel)
        before_kb, fds_before = memory.field("VmRSS"), _fds(server.pid)
        memory.reset_peak()
        rate = saturation(stub, nap_request(0.025))
        result = open_loop(stub, nap_request(0.025), 4 * rate, 10.0)
        crashed = not server.running()
        peak = memory.field("VmHWM") if not crashed else 0
        kept = memory.field("VmRSS") if not crashed else 0
    codes = result.codes()
    lost = sum(n for code, n in codes.items() if code not in REFUSALS)
    return _row(name, result.sent, codes, crashed, result.unanswered, lost, peak - before_kb, kept - before_kb,
                (fds_before, fds_before, _fds(server.pid) if not crashed else 0),
                any(python_internals(a.details) for a in result.answers))


def sigterm_case(server) -> str:
    """Open-loop calls on open connections through SIGTERM until the process has exited (``load.until_exit``)."""
    memory = ServerMemory(server.pid)
    channels = [grpc.insecure_channel(server.grpc_target, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(SIGTERM_CHANNELS)]
    for channel in channels:
        grpc.channel_ready_future(channel).result(timeout=30)
    before_kb, fds_before = memory.field("VmRSS"), _fds(server.pid)
    memory.reset_peak()
    peak = [0, 0]

    def sample() -> None:
        try:
            peak[:] = max(peak[0], memory.field("VmHWM")), max(peak[1], _fds(server.pid))
        except (OSError, KeyError):   # the process has just exited
            pass

    result = until_exit(server, [Stub(c) for c in channels], nap_request(0.1), SIGTERM_PERIOD,
                        calls_before=3 * SIGTERM_CHANNELS, while_draining=sample)
    for channel in channels:
        channel.close()
    return _row("sigterm", result.sent, result.codes(), result.returncode != 0, result.sent - len(result.records),
                sum(r.code not in REFUSALS for r in result.in_flight), peak[0] - before_kb if peak[0] else 0, 0,
                (fds_before, peak[1], 0), any(python_internals(r.details) for r in result.records))


CLIENT_PROCESSES = 3


def _client(target: str, rate: float, seconds: float) -> int:
    """One client process of ``overload-procs``: an open loop; prints its codes as JSON."""
    with grpc.insecure_channel(target) as channel:
        result = open_loop(Stub(channel), good_request(), rate, seconds, max_in_flight=5000)
    print(json.dumps({"sent": result.sent, "codes": result.codes(), "unanswered": result.unanswered,
                      "leaks": any(python_internals(a.details) for a in result.answers)}))
    return 0


def processes_load(server, seconds: float = 10.0) -> tuple[int, dict[str, int], int, int]:
    """``CLIENT_PROCESSES`` open loops at 4x saturation together: (sent, codes, unanswered, replies leaking Python)."""
    with grpc.insecure_channel(server.grpc_target) as channel:
        rate = saturation(Stub(channel), good_request())
    clients = [subprocess.Popen([sys.executable, "-m", "tests.support.security.grpc_table", "--client", server.grpc_target,
                                 str(4 * rate / CLIENT_PROCESSES), str(seconds)], stdout=subprocess.PIPE, text=True)
               for _ in range(CLIENT_PROCESSES)]
    sent = unanswered = leaks = 0
    codes: dict[str, int] = {}
    for client in clients:
        report = json.loads(client.communicate(timeout=seconds + 120)[0].strip().splitlines()[-1])
        sent, unanswered, leaks = sent + report["sent"], unanswered + report["unanswered"], leaks + report["leaks"]
        for code, count in report["codes"].items():
            codes[code] = codes.get(code, 0) + count
    return sent, codes, unanswered, leaks


def processes_case(server, seconds: float = 10.0) -> str:
    memory = ServerMemory(server.pid)
    before_kb, fds_before = memory.field("VmRSS"), _fds(server.pid)
    memory.reset_peak()
    sent, codes, unanswered, leaks = processes_load(server, seconds)
    crashed, peak, kept, fds_after = _after(server, memory)
    lost = sum(n for code, n in codes.items() if code not in REFUSALS)
    return _row("overload-procs", sent, codes, crashed, unanswered, lost, peak - before_kb, kept - before_kb,
                (fds_before, fds_before, fds_after), leaks)


OVERLOAD_SHAPES = {   # case: (flags, batching)
    "overload": ([], {}),
    "overload-batch": ([], {"max_batch_size": 2, "batch_timeout_micros": 0, "num_batch_threads": 1}),
    "overload-32": (["--grpc_max_concurrent_rpcs=32"],
                    {"max_batch_size": 2, "batch_timeout_micros": 0, "num_batch_threads": 1}),
}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, default=None, help="the checkout whose server runs (default: this)")
    parser.add_argument("--cases",
                        default="stall-8,stall-300,idle-conns,overload,overload-batch,overload-32,overload-procs,sigterm")
    parser.add_argument("--client", nargs=3, metavar=("TARGET", "RATE", "SECONDS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client:
        return _client(args.client[0], float(args.client[1]), float(args.client[2]))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    workdir = Path(tempfile.mkdtemp(prefix="grpc-table-"))
    print(f"checkout {args.checkout or 'this'}; flags {' '.join(AFTER_FLAGS)} (ignored by a server without them)")
    print(HEADER)
    for case in args.cases.split(","):
        flags, batching = OVERLOAD_SHAPES.get(case, ([], None))
        if case == "sigterm":
            batching = SIGTERM_BATCHING
        server = _server(args.checkout, workdir / case, flags, batching)
        try:
            if case == "stall-8":
                print(stall_case(server, case, 8, 1), flush=True)
            elif case == "stall-300":
                print(stall_case(server, case, 300, 3), flush=True)
            elif case == "idle-conns":
                print(idle_case(server), flush=True)
            elif case in OVERLOAD_SHAPES:
                print(overload_case(server, case), flush=True)
            elif case == "overload-procs":
                print(processes_case(server), flush=True)
            elif case == "sigterm":
                print(sigterm_case(server), flush=True)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    importlib.import_module("serving")
    sys.exit(main())
