"""The gRPC attack cases against the embedded server, and the table they make.

Each ``AttackCase`` sends a few requests (bounded in count, 30 s each at most)
to a real server on 127.0.0.1 while a ``GoodProbe`` keeps sending a good
request every 50 ms, and ``run_case`` reports, as the issue's table does:
requests sent, client errors (a 4xx-equivalent gRPC code), server errors
(5xx-equivalent), crashes (the server process died), hangs (no answer in
time), failed good requests (an error, or an answer slower than 1 s), plus the
server's peak RSS growth and whether a message carried Python internals.

``python -m tests.support.security.attacks`` starts its own servers and prints the
table; it only uses the launcher, the codec and the tests' model, so it also
runs against older checkouts (put them first on ``PYTHONPATH``) for a
before/after comparison. The tests in ``test_grpc_attacks.py`` assert on the
same results.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import grpc
import numpy as np
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from serving import codec, status
from serving.launcher import ServerProcess
from tests.support.security.models import MODEL
from tests.support.models import export_tiny

__all__ = [
    "BATCHING",
    "CASES",
    "HIGH_CAP_FLAGS",
    "AttackCase",
    "CaseResult",
    "GoodProbe",
    "ServerMemory",
    "napping_repo",
    "start_server",
    "run_case",
    "python_internals",
    "format_table",
    "main",
]

BATCHING = {"max_batch_size": 32, "batch_timeout_micros": 1000, "num_batch_threads": 2}
HIGH_CAP_FLAGS = ("--max_tensor_elements=1099511627776",)   # 2**40: lets numpy itself fail
REQUEST_TIMEOUT = 30.0
GOOD_LATENCY_LIMIT = 1.0
DT_FLOAT = 1

Stub = prediction_service_pb2_grpc.PredictionServiceStub


def napping_repo(root: Path) -> Path:
    """``root`` holding the napping model at version 1 (exported unless already there)."""
    version = root / MODEL / "1"
    if not (version / "saved_model.pb").exists():
        export_tiny(version)
    return root


def start_server(repo: Path, workdir: Path, extra_flags: Sequence[str] = (),
                 batching: Optional[dict[str, int]] = None) -> ServerProcess:
    """The embedded server serving the napping model with ``batching`` (default ``BATCHING``) and
    otherwise its default flags, plus ``extra_flags``."""
    return ServerProcess.for_models({MODEL: repo / MODEL}, workdir=workdir, batching=batching or BATCHING,
                                    extra_flags=list(extra_flags)).start()


# -- requests --------------------------------------------------------------------------------
def good_request() -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = MODEL
    codec.ndarray_to_tensor_proto(np.ones((1, 3), np.float32), request.inputs["x"])
    return request


def broadcast_request(shapes: dict[str, Sequence[int]], values: Sequence[float] = (1.0,)
                      ) -> predict_pb2.PredictRequest:
    """A Predict whose every input is ``values`` filling its shape (TensorFlow's rule: the last value repeats)."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = MODEL
    for name, shape in shapes.items():
        tensor = request.inputs[name]
        tensor.dtype = DT_FLOAT
        for size in shape:
            tensor.tensor_shape.dim.add().size = size
        tensor.float_val.extend(values)
    return request


@dataclasses.dataclass(frozen=True)
class Outcome:
    code: grpc.StatusCode
    details: str
    seconds: float


def call(stub: Stub, request: predict_pb2.PredictRequest, timeout: Optional[float] = REQUEST_TIMEOUT) -> Outcome:
    """One Predict; ``timeout=None`` sets no gRPC deadline at all (the client waits REQUEST_TIMEOUT s)."""
    started = time.monotonic()
    future = stub.Predict.future(request, timeout=timeout)
    try:
        future.result(timeout=REQUEST_TIMEOUT)
        return Outcome(grpc.StatusCode.OK, "", time.monotonic() - started)
    except grpc.FutureTimeoutError:
        future.cancel()
        return Outcome(grpc.StatusCode.DEADLINE_EXCEEDED, "no answer", time.monotonic() - started)
    except grpc.RpcError as error:
        return Outcome(error.code(), error.details() or "", time.monotonic() - started)


# -- the cases -------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class AttackCase:
    """``count`` requests made by ``request()``; ``expected`` are the codes a hardened server answers."""

    name: str
    what: str
    request: Callable[[], predict_pb2.PredictRequest]
    expected: frozenset
    count: int = 3
    deadline: bool = True
    high_cap: bool = False   # needs the server started with HIGH_CAP_FLAGS
    past_cap: bool = True    # refused by --max_tensor_elements (else by the model's own checks)


CLIENT_ERROR = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED})

CASES = (
    AttackCase("issue-bomb", "the issue's 50-byte Predict: one float filling [1000000, 8, 8, 1] (64M floats)",
               lambda: broadcast_request({"x": [1_000_000, 8, 8, 1]}), CLIENT_ERROR, past_cap=False),
    AttackCase("tensor-bomb", "50-byte Predict: one float filling [2**27, 3] (402M floats, 1.6 GB)",
               lambda: broadcast_request({"x": [2**27, 3]}), CLIENT_ERROR),
    AttackCase("tensor-bomb-768GiB", "one float filling [2**36, 3] (768 GiB as float32)",
               lambda: broadcast_request({"x": [2**36, 3]}), CLIENT_ERROR),
    AttackCase("shape-overflow", "shape [2**40, 2**40, 3]: its int64 element count wraps to 0",
               lambda: broadcast_request({"x": [2**40, 2**40, 3]}), CLIENT_ERROR),
    AttackCase("many-inputs", "6 inputs of one float filling [2**24, 3] each (302M floats together)",
               lambda: broadcast_request({f"x{i}": [2**24, 3] for i in range(6)}), CLIENT_ERROR),
    AttackCase("no-deadline", "a good Predict on the batched model from a client that sets no deadline",
               good_request, frozenset({grpc.StatusCode.OK}), deadline=False),
    AttackCase("internal-error", "--max_tensor_elements raised to 2**40: two floats filling [2**36, 3], "
               "numpy cannot allocate 768 GiB", lambda: broadcast_request({"x": [2**36, 3]}, (1.0, 2.0)),
               frozenset({grpc.StatusCode.INTERNAL}), count=1, high_cap=True),
)


# -- watching the server ---------------------------------------------------------------------
class ServerMemory:
    """The server process's resident memory from ``/proc/<pid>/status`` (kB)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def field(self, name: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1])
        raise KeyError(name)

    def reset_peak(self) -> bool:
        """Reset VmHWM to the current RSS (``clear_refs`` 5); False where the kernel refuses."""
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
            return True
        except OSError:
            return False


class GoodProbe:
    """A thread sending a good request every 50 ms; a context manager. Counts answers slower than 1 s."""

    def __init__(self, stub: Stub) -> None:
        self._stub = stub
        self._stop = threading.Event()
        self.answered = threading.Event()
        self.outcomes: list[Outcome] = []
        self._thread = threading.Thread(target=self._run, name="good-probe", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.outcomes.append(call(self._stub, good_request(), timeout=5.0))
            self.answered.set()
            self._stop.wait(0.05)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.code != grpc.StatusCode.OK or o.seconds > GOOD_LATENCY_LIMIT]

    def __enter__(self) -> "GoodProbe":
        self._thread.start()
        if not self.answered.wait(REQUEST_TIMEOUT):
            raise RuntimeError("the server never answered the good request")
        return self

    def __exit__(self, *exc: object) -> None:
        self.answered.clear()
        self.answered.wait(REQUEST_TIMEOUT)   # one more good answer after the attack
        self._stop.set()
        self._thread.join(REQUEST_TIMEOUT)


# -- results ---------------------------------------------------------------------------------
_PYTHON_INTERNALS = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception)\b|Traceback|File \"")


def python_internals(message: str) -> bool:
    """Whether a message carries a Python exception class or traceback text."""
    return bool(_PYTHON_INTERNALS.search(message))


@dataclasses.dataclass
class CaseResult:
    case: AttackCase
    outcomes: list[Outcome]
    crashed: bool
    good: list[Outcome]
    good_failures: list[Outcome]
    rss_growth_mb: float

    def count(self, kind: str) -> int:
        return sum(1 for o in self.outcomes if _kind(o.code) == kind)

    @property
    def leaks(self) -> int:
        return sum(1 for o in self.outcomes if python_internals(o.details))

    @property
    def as_expected(self) -> bool:
        return all(o.code in self.case.expected for o in self.outcomes)


def _kind(code: grpc.StatusCode) -> str:
    if code == grpc.StatusCode.OK:
        return "ok"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "hang"
    http = status.to_http_status(status.from_grpc_status(code))
    return "4xx" if 400 <= http < 499 else "5xx"


def run_case(server: ServerProcess, case: AttackCase) -> CaseResult:
    """Send ``case``'s requests (one at a time) while the good probe runs; the server must stay up."""
    memory = ServerMemory(server.pid)
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = Stub(channel)
        call(stub, good_request())   # warm: the first call builds the session callable
        before = memory.field("VmRSS")
        peak_resettable = memory.reset_peak()
        with GoodProbe(stub) as probe:
            outcomes = [call(stub, case.request(), timeout=REQUEST_TIMEOUT if case.deadline else None)
                        for _ in range(case.count)]
        crashed = not server.running()
        after = 0 if crashed else memory.field("VmHWM" if peak_resettable else "VmRSS")
    return CaseResult(case, outcomes, crashed, probe.outcomes, probe.failures,
                      max(0, after - before) / 1024)


def format_table(results: Sequence[CaseResult]) -> str:
    """The issue's table: one line per case and a total."""
    header = (f"{'case':<20} {'sent':>4} {'4xx':>4} {'5xx':>4} {'crashes':>7} {'hangs':>5} "
              f"{'failed good':>11} {'RSS +MB':>8} {'py text':>7}  codes")
    lines = [header, "-" * len(header)]
    for r in results:
        codes = ",".join(sorted({o.code.name for o in r.outcomes}))
        lines.append(f"{r.case.name:<20} {len(r.outcomes):>4} {r.count('4xx'):>4} {r.count('5xx'):>4} "
                     f"{int(r.crashed):>7} {r.count('hang'):>5} {len(r.good_failures):>11} "
                     f"{r.rss_growth_mb:>8.0f} {r.leaks:>7}  {codes}")
    total = (sum(len(r.outcomes) for r in results), sum(r.count("4xx") for r in results),
             sum(r.count("5xx") for r in results), sum(r.crashed for r in results),
             sum(r.count("hang") for r in results), sum(len(r.good_failures) for r in results))
    lines.append(f"{'total':<20} {total[0]:>4} {total[1]:>4} {total[2]:>4} {total[3]:>7} {total[4]:>5} {total[5]:>11}")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None, help="model and server files (default: a temp dir)")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="attacks-"))
    repo = napping_repo(workdir / "models")
    results: list[CaseResult] = []
    for high_cap in (False, True):
        server: Optional[ServerProcess] = None
        try:
            for case in (c for c in CASES if c.high_cap == high_cap):
                if server is None or not server.running():   # a crash ends a server; the next case needs one
                    if server is not None:
                        server.stop()
                    server = start_server(repo, workdir / f"server-{case.name}", HIGH_CAP_FLAGS if high_cap else ())
                results.append(run_case(server, case))
        finally:
            if server is not None:
                server.stop()
    print(format_table(results))
    for result in results:
        for outcome in {o.details: o for o in result.outcomes if o.details}.values():
            print(f"  {result.case.name}: {outcome.code.name}: {outcome.details[:160]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
