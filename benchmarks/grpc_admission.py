"""What reading a gRPC call's message before it takes a thread costs: this checkout's server against another's.

Two embedded servers serve the same model, one from this checkout and one
from ``--baseline`` (another checkout's root, e.g. main's worktree, whose
``serving`` package is put first on its ``sys.path``). Closed-loop lean gRPC
clients (a pre-serialized PredictRequest on a bytes-in/bytes-out stub,
``benchmarks.protocols``) at each concurrency take turns on them in
interleaved rounds, so the shared machine's load hits both alike. Printed per
concurrency: requests/s and the server's CPU-ms per request (``/proc``), and
the ratio this checkout / baseline.

    python -m benchmarks.grpc_admission --baseline /work/main --model-repo DIR --model digits
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from benchmarks.protocols import Run, Side, run_side
from loadtest.driver import grpc_transport
from exporter.manifest import load_manifest
from serving import codec, wire
from serving.model_repo import model_versions
from serving.server.launcher import ServerProcess

__all__ = ["CheckoutServer", "main"]

logger = logging.getLogger("benchmarks.grpc_admission")


class CheckoutServer(ServerProcess):
    """``ServerProcess`` running the ``serving`` package of the checkout at ``root`` (None: this one)."""

    root: Optional[Path] = None

    @property
    def command(self) -> list[str]:
        if self.root is None:
            return super().command
        code = (f"import sys; sys.path.insert(0, {str(self.root)!r}); "
                "import serving.server.__main__ as m; import os; os._exit(m.run())")
        return [sys.executable, "-c", code, *self.args]


def _lean_grpc(target: str, payload: bytes) -> Side:
    return Side("lean", "grpc", grpc_transport(target, wire.PREDICT, payload, timeout=120))


def main(argv: Optional[Sequence[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s] %(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = argparse.ArgumentParser(prog="python -m benchmarks.grpc_admission", description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout's root")
    parser.add_argument("--model-repo", type=Path, required=True, metavar="DIR")
    parser.add_argument("--model", default="digits")
    parser.add_argument("--concurrency", default="1,32", help="comma-separated (default: 1,32)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    args = parser.parse_args(argv)
    base = (args.model_repo / args.model).resolve()
    inputs = load_manifest(base / str(max(model_versions(base)))).sample_inputs(batch_size=1)
    payload = codec.encode_predict_request(args.model, inputs, signature_name=codec.DEFAULT_SIGNATURE)
    pooled: dict[tuple[str, int], Run] = {}
    with contextlib.ExitStack() as stack:
        servers = {}
        for name, root in (("baseline", args.baseline.resolve()), ("this", None)):
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"bench-admission-{name}-")))
            server = CheckoutServer.for_models({args.model: base}, workdir=workdir)
            server.root = root
            servers[name] = stack.enter_context(server)
        sides = {name: _lean_grpc(server.grpc_target, payload) for name, server in servers.items()}
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            for index in range(args.rounds):
                order = ["baseline", "this"] if index % 2 == 0 else ["this", "baseline"]
                for name in order:
                    run = run_side(servers[name].pid, sides[name], concurrency, args.warmup, args.duration)
                    logger.info("c=%d round %d %s: %.0f req/s, server %.3f CPU-ms/req, %d errors", concurrency,
                                index + 1, name, run.rate, run.ms_per_request(run.server_cpu), run.errors)
                    key = (name, concurrency)
                    pooled[key] = pooled[key] + run if key in pooled else run
    print(f"{'c':>3} {'side':<9} {'req/s':>8} {'server CPU-ms/req':>18} {'errors':>6}")
    for (name, concurrency), run in sorted(pooled.items(), key=lambda item: (item[0][1], item[0][0])):
        print(f"{concurrency:>3} {name:<9} {run.rate:>8.0f} {run.ms_per_request(run.server_cpu):>18.3f} "
              f"{run.errors:>6}")
    for concurrency in sorted({c for _, c in pooled}):
        this, baseline = pooled["this", concurrency], pooled["baseline", concurrency]
        print(f"c={concurrency}: this/baseline req/s {this.rate / baseline.rate:.3f}, server CPU-ms/req "
              f"{this.ms_per_request(this.server_cpu) / baseline.ms_per_request(baseline.server_cpu):.3f}")
    print(f"NOTE  {len(os.sched_getaffinity(0))} cores shared with other work; 1-min load average "
          f"{os.getloadavg()[0]:.1f}; {args.rounds} interleaved rounds of {args.duration:g} s per side")
    return 0


if __name__ == "__main__":
    sys.exit(main())
