"""What reading a gRPC call's message before it takes a thread costs: this checkout's server against another's.

Two embedded servers serve the same model, one from this checkout and one
from ``--baseline`` (another checkout's root, e.g. main's worktree, whose
``serving`` package is put first on its ``sys.path``). Closed-loop lean gRPC
clients (a pre-serialized PredictRequest on a bytes-in/bytes-out stub,
``benchmarks.servers.predict_served``) at each concurrency take turns on them in
interleaved rounds (``benchmarks.runner``), so the shared machine's load hits both
alike. Printed per concurrency: requests/s and the server's CPU-ms per request
(``/proc``), and the ratios this checkout / baseline (medians of the rounds').

    python -m benchmarks.grpc_admission --baseline OTHER_CHECKOUT --model-repo DIR --model digits
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

from benchmarks import runner
from benchmarks.runner import Compare, Load, Scenario, Served, Server
from benchmarks.servers import payloads_of, predict_served
from serving.launcher import ServerProcess

__all__ = ["CheckoutServer", "checkout", "main"]


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


def checkout(name: str, repo: Path, root: Optional[Path]) -> Server:
    """The embedded server of the checkout at ``root`` (None: this one), serving the scenario's models."""
    def start(stack: contextlib.ExitStack, models: Sequence[str]) -> Served:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"bench-admission-{name}-")))
        server = CheckoutServer.for_models({m: repo / m for m in models}, workdir=workdir)
        server.root = root
        stack.enter_context(server)
        return predict_served(server, payloads_of(repo), server.pid)

    return Server(name, start)


def main(argv: Optional[Sequence[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s] %(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = argparse.ArgumentParser(prog="python -m benchmarks.grpc_admission", description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout's root")
    parser.add_argument("--model-repo", type=Path, required=True, metavar="DIR")
    parser.add_argument("--model", default="digits")
    parser.add_argument("--concurrency", default="1,32", help="comma-separated (default: 1,32)")
    runner.add_arguments(parser, rounds=3, duration=4.0)
    args = parser.parse_args(argv)
    repo, load_before = args.model_repo.resolve(), os.getloadavg()[0]
    loads = [Load(args.model, "grpc", int(c)) for c in args.concurrency.split(",")]
    ratios = [Compare(f"c={load.concurrency}: this / baseline {what}", ("this", load), ("baseline", load), None,
                      metric) for load in loads for what, metric in (("req/s", "rate"), ("server CPU-ms/req", "cpu"))]
    cells = runner.run(Scenario([checkout("baseline", repo, args.baseline.resolve()), checkout("this", repo, None)],
                                loads, ratios, args.rounds, args.warmup, args.duration))
    runner.print_report(cells, ratios, [runner.machine_note(
        load_before, f"shared with other work; {args.rounds} interleaved rounds of {args.duration:g} s per side")])
    runner.write_json(args.json, "benchmarks.grpc_admission", cells)
    return 0


if __name__ == "__main__":
    sys.exit(main())
