"""``python -m deploy.k8s generate|check``: the kustomize inputs generated from the compose stack's files.

- ``generate`` writes every generated file under ``deploy/k8s`` (the variants'
  TF Serving and exporter patches from compose, the ConfigMap files from
  ``serving/*.config``, the PrometheusRule from the rule files).
- ``check`` writes nothing and exits 1, naming each stale file, when a fresh
  render differs from what is committed.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from deploy.k8s.generate import Checkout, stale_files, write_all
from serving.checkout import REPO_ROOT

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m deploy.k8s", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, default=None, metavar="DIR",
                        help="the tfs-stack checkout to read and write (default: the one this module is in)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("generate", help="write the generated files")
    sub.add_parser("check", help="exit 1 when a generated file is stale")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    checkout = Checkout((args.checkout or REPO_ROOT).resolve())
    if args.command == "generate":
        changed = write_all(checkout)
        print("\n".join(f"wrote {p}" for p in changed) or "up to date")
        return 0
    stale = stale_files(checkout)
    if stale:
        print("stale (run `python -m deploy.k8s generate`):\n" + "\n".join(f"  {p}" for p in stale), file=sys.stderr)
        return 1
    print("up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
