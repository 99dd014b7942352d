"""This tree against a git revision of it, side by side: the embedded server's requests/s at one concurrency.

Two servers run at once, one model each, both with this tree's config files:
``base`` runs the server code of ``--base`` (the revision's files, ``git archive``
into a temporary directory, first on the server's ``sys.path``), ``head`` this
tree's. ``loadtest.driver``'s closed-loop clients (raw bytes: a pre-serialized
PredictRequest, a pre-encoded REST body; ``benchmarks.servers.predict_served``)
load one server at a time, alternating in rounds (``benchmarks.runner``), so the
machine's changing load hits both alike. Only the server code differs; the
clients, payloads and model are the same. Targets, exit 1 when one is missed:
head / base requests/s ≥ ``REVISION_THROUGHPUT`` over gRPC and over REST
(median of the rounds' ratios).

    python -m benchmarks.revisions --base 858d702 --model-repo DIR    # digits, c=32
    python -m benchmarks.revisions --base main~3 --model-repo DIR --rounds 8 --duration 5
"""
from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from benchmarks import runner
from benchmarks.runner import Compare, Load, Scenario
from benchmarks.servers import payloads_of, predict_served, running
from benchmarks.targets import REVISION_THROUGHPUT
from serving.checkout import REPO_ROOT
from serving.launcher import ServerProcess, write_config_files

__all__ = ["RevisionServer", "build_parser", "checkout", "main", "scenario"]


def checkout(revision: str, into: Path, repo: Path = REPO_ROOT) -> str:
    """The files of ``revision`` of ``repo`` written under ``into`` (no worktree, no index); its commit id."""
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", f"{revision}^{{commit}}"],
                            check=True, capture_output=True, text=True).stdout.strip()
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return commit


class RevisionServer(ServerProcess):
    """``ServerProcess`` running the server code under ``tree`` (first on ``sys.path``, ahead of the
    launcher's working directory, this checkout)."""

    def __init__(self, tree: Path, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.tree = Path(tree)

    @property
    def command(self) -> list[str]:
        start = (f"import runpy, sys; sys.path.insert(0, {str(self.tree)!r}); "
                 "runpy.run_module('serving.server', run_name='__main__', alter_sys=True)")
        return [sys.executable, "-c", start, *self.args]


def _server(tree: Optional[Path], model: str, repo: Path, workdir: Path) -> ServerProcess:
    """The server of ``model`` with this tree's config files in ``workdir``: ``tree``'s code, or this tree's."""
    if tree is None:
        return ServerProcess.for_models({model: repo / model}, workdir=workdir, timeout=900)
    flags = write_config_files(workdir, {model: (repo / model).resolve()})
    return RevisionServer(tree, flags, wait_for=[model], log_path=workdir / "server.log", timeout=900)


def scenario(base: ServerProcess, head: ServerProcess, repo: Path, model: str = "digits", concurrency: int = 32,
             rounds: int = 5, warmup: float = 1.0, duration: float = 4.0) -> Scenario:
    """``base`` and ``head`` (running) under the same closed-loop gRPC and REST loads."""
    payloads = payloads_of(repo)
    loads = [Load(model, protocol, concurrency) for protocol in ("grpc", "rest")]
    targets = [Compare(f"head / base requests/s, {load.protocol} c={concurrency}", ("head", load), ("base", load),
                       REVISION_THROUGHPUT) for load in loads]
    targets += [Compare(f"head / base server CPU per request, {load.protocol} c={concurrency}", ("head", load),
                        ("base", load), None, metric="cpu") for load in loads]
    return Scenario([running("base", predict_served(base, payloads, base.pid)),
                     running("head", predict_served(head, payloads, head.pid))],
                    loads, targets, rounds, warmup, duration)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.revisions", description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, metavar="REV", help="the git revision to compare against")
    parser.add_argument("--model-repo", type=Path, default=REPO_ROOT / "models", metavar="DIR",
                        help="model repository holding the model (default: <checkout>/models)")
    parser.add_argument("--model", default="digits", help="the model to serve (default: digits)")
    parser.add_argument("--concurrency", type=int, default=32, help="client threads (default: 32)")
    runner.add_arguments(parser, rounds=5, duration=4.0)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s] %(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser().parse_args(argv)
    repo = args.model_repo.resolve()
    if not (repo / args.model).is_dir():   # the servers would wait for it until their timeout
        print(f"no model {args.model!r} in {repo}", file=sys.stderr)
        return 2
    load_before = os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-revisions-")))
        (tmp / "tree").mkdir()
        commit = checkout(args.base, tmp / "tree")
        head_commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True,
                                     text=True).stdout.strip()
        print(f"base = {args.base} ({commit[:12]}), head = this tree ({REPO_ROOT}, HEAD {head_commit[:12]})")
        (tmp / "base").mkdir()
        (tmp / "head").mkdir()
        base = stack.enter_context(_server(tmp / "tree", args.model, repo, tmp / "base"))
        head = stack.enter_context(_server(None, args.model, repo, tmp / "head"))
        declared = scenario(base, head, repo, args.model, args.concurrency, args.rounds, args.warmup, args.duration)
        cells = runner.run(declared)
    found = runner.print_report(cells, declared.targets, [runner.machine_note(
        load_before, f"servers measured in turn, {args.rounds} rounds of {args.duration:g} s")], baseline="base")
    runner.write_json(args.json, "benchmarks.revisions", cells)
    return 0 if found and all(t.passed for t in found) else 1


if __name__ == "__main__":
    sys.exit(main())
