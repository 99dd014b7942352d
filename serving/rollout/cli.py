"""``python -m serving.rollout``: publish a version, canary it, promote or roll back.

Every command that moves labels reads the current state from ``--config-file``
(the models config the server was started with), pushes each planned step
with ``HandleReloadConfigRequest``, waits for the versions to be AVAILABLE
(``GetModelStatus``) and writes the pushed config back to the file.

Flags use the project's CLI vocabulary: ``--grpc HOST:PORT`` for the server,
``--model-repo DIR`` for the model repository, ``--version N`` and ``--label
NAME``. Default paths are anchored on the checkout, not the current directory.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from serving import status
from serving.config import load_model_server_config
from serving.model_repo import model_versions
from serving.rollout.plan import (
    RolloutError,
    canary_labels,
    find_model,
    plan_label_move,
    promote_labels,
    rollback_labels,
    served_versions,
)
from serving.rollout.publish import export_version, publish_saved_model
from serving.rollout.runner import Rollout, connect, version_states

if TYPE_CHECKING:  # tensorflow_serving's protos load only when a config is read
    from tensorflow_serving.config.model_server_config_pb2 import ModelServerConfig

__all__ = ["main", "build_parser"]

REPO_ROOT = Path(__file__).resolve().parents[2]


def _publish(args: argparse.Namespace) -> int:
    if args.from_dir:
        path = publish_saved_model(args.from_dir, args.model_repo, args.model, args.version)
    else:
        path = export_version(args.model_name or args.model, args.model_repo,
                              variant=args.variant, version=args.version)
    print(f"published {path} (not served yet: `python -m serving.rollout canary "
          f"--model {args.model} --version {path.name}`)")
    return 0


def _labels_for(args: argparse.Namespace, config: ModelServerConfig) -> dict[str, int]:
    if args.command == "canary":
        return canary_labels(config, args.model, args.version)
    if args.command == "promote":
        return promote_labels(config, args.model)
    if args.command == "rollback":
        return rollback_labels(config, args.model)
    return {**find_model(config, args.model).version_labels, args.label: args.version}


def _check_versions_exist(args: argparse.Namespace, labels: dict[str, int]) -> None:
    if args.model_repo is None:
        return
    found = model_versions(args.model_repo / args.model)
    missing = sorted(set(labels.values()) - set(found))
    if missing:
        raise RolloutError(f"{args.model}: version(s) {missing} not found in {args.model_repo / args.model} "
                           f"(has {found}); publish first")


def _move(args: argparse.Namespace) -> int:
    config = load_model_server_config(args.config_file)
    labels = _labels_for(args, config)
    _check_versions_exist(args, labels)
    steps = plan_label_move(config, args.model, labels)
    if args.dry_run:
        for step in steps:
            print(f"would {step.description}")
        return 0
    with connect(args.grpc) as client:
        Rollout(client, config_file=None if args.no_write_back else args.config_file,
                wait_timeout=args.timeout).apply(args.model, steps)
    print(f"{args.model}: labels {dict(sorted(labels.items()))}")
    return 0


def _status(args: argparse.Namespace) -> int:
    entry = find_model(load_model_server_config(args.config_file), args.model)
    print(f"{args.model}: config serves {served_versions(entry)}, labels {dict(sorted(entry.version_labels.items()))}")
    with connect(args.grpc) as client:
        for version, state in sorted(version_states(client, args.model).items()):
            error = state.error_message
            print(f"  version {version}: {state.state}{' ' + error if error else ''}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m serving.rollout", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    publish = sub.add_parser("publish", help="put a new version into the model repository")
    publish.add_argument("--from", dest="from_dir", type=Path, help="a SavedModel directory to copy")
    publish.add_argument("--model-name", help="zoo model to export (default: --model) when --from is absent")
    publish.add_argument("--variant", default="fp32", help="exporter variant when exporting (default: fp32)")
    moves = {
        "canary": "load VERSION beside stable and point `canary` at it",
        "promote": "point `stable` at the canary's version and unload the old one",
        "rollback": "point `canary` back at stable and unload the canary's version",
        "set-label": "point LABEL at VERSION (loading it first)",
    }
    movers = [sub.add_parser(name, help=text) for name, text in moves.items()]
    stat = sub.add_parser("status", help="the config's versions and labels, and the server's states")
    for p in [publish, *movers, stat]:
        p.add_argument("--model", required=True, help="published model name, e.g. digits")
    for p in [*movers, stat]:
        p.add_argument("--grpc", metavar="HOST:PORT", default="127.0.0.1:8500",
                       help="the server's gRPC address (default: 127.0.0.1:8500)")
        p.add_argument("--config-file", type=Path, default=REPO_ROOT / "serving" / "models.config",
                       help="models config the server runs (default: <checkout>/serving/models.config)")
    for p in [publish, *movers]:
        p.add_argument("--model-repo", type=Path, metavar="DIR",
                       default=None if p is not publish else REPO_ROOT / "models",
                       help="host model repository (publish default: <checkout>/models; movers: checks versions exist)")
    for p in movers:
        p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for a version to load")
        p.add_argument("--no-write-back", action="store_true", help="do not rewrite --config-file")
        p.add_argument("--dry-run", action="store_true", help="print the steps only")
    publish.add_argument("--version", type=int, metavar="N", help="version number (default: next free)")
    for name in ("canary", "set-label"):
        movers[list(moves).index(name)].add_argument("--version", type=int, metavar="N", required=True)
    movers[list(moves).index("set-label")].add_argument("--label", metavar="NAME", required=True)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "publish":
            return _publish(args)
        if args.command == "status":
            return _status(args)
        return _move(args)
    except (RolloutError, status.ServingError, FileNotFoundError, FileExistsError) as exc:
        print(f"rollout failed: {exc}", file=sys.stderr)
        return 1
