"""``python -m serving.config``: check, render and edit the TF Serving models config.

- ``check`` parses every file in ``serving/`` with the real TF Serving protos
  and holds each model to TF Serving's rules; zoo names must live where the
  exporter publishes them, any other model must have a version under its base
  path (with ``--model-repo``, the zoo's exports are checked too;
  ``--config-file`` checks one models config against this host's directories).
- ``add NAME --base-path DIR [--policy latest:N|all|versions:1,2] [--label
  stable=1 ...]`` and ``remove NAME`` change the config the stack serves
  (``serving.config.served_config``: the file ``make up`` recorded, else the compose
  file ``serving/models.config``), for any model. Names (``serving.config.names``),
  paths and labels are checked first. Then, holding the config's lock
  (``serving.config.config_lock``), the file is written atomically if it is
  still what was read (else the change is planned again on the new file,
  keeping the other command's change), and, where a server answers, pushed
  with ``HandleReloadConfigRequest`` (waiting until the versions are
  AVAILABLE). A failed add or remove puts only its own model back. ``add``
  serves the newest version that was not rolled back (``--version N`` names
  one); ``remove`` of the last model needs ``--force``. Exit codes: 0 done,
  1 refused (the reason is printed), 4 refused because the config's lock was
  held past ``--timeout``.
- ``render`` prints the config the stack serves, or writes ``models.config``
  from the zoo (``--zoo``, ``--all``) or from another config with its base
  paths remapped (``--from-config``).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from google.protobuf.message import Message

from serving.addresses import grpc_address
from serving.client import add_connection_arguments, connection_from_args
from serving.config import load_batching_parameters, load_model_server_config, load_monitoring_config
from serving.config.checks import check_batching_parameters, check_monitoring_config, check_warmup_fits
from serving.config.edit import VersionPolicy, add_steps, find_entry, model_entry, parse_labels, remove_steps
from serving.config.models import (
    CONTAINER_MODELS_DIR,
    HEADER,
    LABELS,
    check_in_sync,
    check_model_dirs,
    check_model_server_config,
    format_model_server_config,
    remap_base_paths,
    render_model_server_config,
    without_gpu_only,
    write_model_server_config,
)
from serving.config.config_lock import LockTimeout, StaleConfig
from serving.config.names import model_name_problem
from serving.config.reload import ReloadError
from serving.config.rollbacks import ROLLED_BACK_FILE, reinstate, rolled_back_versions, stable_version
from serving.config.served_config import (
    COMPOSE_PAIR,
    DEFAULT_MODEL_REPO,
    DEFAULT_WORK_DIR,
    SERVING_DIR,
    ServedConfig,
    change_served_config,
    read_state,
    served_config,
    write_state,
)
from serving.model_repo import ZOO, model_versions

__all__ = ["main", "build_parser", "check_serving_dir", "CONFIG_FILES", "EXIT_STALE"]

# The exit code of an add or remove refused because another command changed the config first and it could
# not be planned again (or held the config's lock past --timeout); 1 is every other refusal.
EXIT_STALE = 4

# Variant → (models config, batching config) in the serving directory.
CONFIG_FILES = {
    "gpu": (COMPOSE_PAIR[0], "batching.config"),
    "cpu": (COMPOSE_PAIR[1], "batching.cpu.config"),
}
MONITORING_FILE = "monitoring.config"
CPU_HEADER = HEADER + ("# CPU variant (docker-compose.cpu.yml, make up without a GPU): models.config without the\n"
                       "# TensorRT models. `python -m serving.config check` fails when the two drift apart.\n")


def check_serving_dir(serving_dir: Path, *, models_dir: Optional[Path] = None,
                      variant: str = "gpu",
                      base_path_prefix: str = CONTAINER_MODELS_DIR) -> list[str]:
    """Every problem with the config files in ``serving_dir``; empty when all are fine.

    A model outside the zoo must have a version in ``models_dir`` (default:
    the checkout's ``models/``). With ``models_dir`` given, the ``variant``'s
    models config is also checked against it (``/models/<name>`` →
    ``models_dir/<name>``): every model exported, every configured version there.
    """
    problems: list[str] = []
    configs, batching = {}, {}
    for name, (models_file, batching_file) in CONFIG_FILES.items():
        configs[name] = _parsed(serving_dir / models_file, load_model_server_config, problems)
        if configs[name] is not None:
            problems += [f"{models_file}: {p}" for p in check_model_server_config(
                configs[name], models_dir=models_dir or DEFAULT_MODEL_REPO, base_path_prefix=base_path_prefix)]
        batching[name] = _parsed(serving_dir / batching_file, load_batching_parameters, problems)
        if batching[name] is not None:
            problems += [f"{batching_file}: {p}" for p in check_batching_parameters(batching[name])]
    gpu = batching.get("gpu")
    if all(batching.values()) and gpu is not None:
        warmup_sizes = list(gpu.allowed_batch_sizes)  # what the exporter warms up
        for name, params in batching.items():
            problems += [f"{CONFIG_FILES[name][1]}: {p}" for p in check_warmup_fits(params, warmup_sizes)]
    monitoring = _parsed(serving_dir / MONITORING_FILE, load_monitoring_config, problems)
    if monitoring is not None:
        problems += [f"{MONITORING_FILE}: {p}" for p in check_monitoring_config(monitoring)]
    if configs["gpu"] is not None and configs["cpu"] is not None:
        problems += [f"models.cpu.config: {p} (run `python -m serving.config render --all`)"
                     for p in check_in_sync(configs["gpu"], configs["cpu"])]
    if models_dir is not None and configs[variant] is not None:
        problems += [f"{models_dir}: {p}" for p in check_model_dirs(
            configs[variant], models_dir, base_path_prefix=base_path_prefix)]
    return problems


def _parsed(path: Path, loader: Callable[[Path], Message], problems: list[str]) -> Optional[Message]:
    try:
        return loader(path)
    except (OSError, ValueError) as exc:
        problems.append(f"{path.name}: {exc}")
        return None


def _check_one(args: argparse.Namespace) -> list[str]:
    """Problems with one models config, its base paths read as the server that serves it reads them."""
    served = _served(args)
    problems: list[str] = []
    config = _parsed(served.path, load_model_server_config, problems)
    if config is None:
        return problems
    return [f"{served.path.name}: {p}" for p in check_model_server_config(config) + served.problems(config)]


def _check(args: argparse.Namespace) -> int:
    if args.config_file is not None:
        problems, checked = _check_one(args), f"{args.config_file}: every model"
    else:
        problems = check_serving_dir(args.serving_dir, models_dir=args.model_repo, variant=args.variant,
                                     base_path_prefix=args.base_path_prefix)
        checked = f"{args.serving_dir}: config files" + (
            f" and the {args.variant} models in {args.model_repo}" if args.model_repo else "")
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"OK {checked} pass TF Serving's rules and the exporter's published names")
    return 0


def _served(args: argparse.Namespace) -> ServedConfig:
    served = served_config(args.config_file, grpc=getattr(args, "grpc", None), model_repo=args.model_repo,
                           work_dir=args.work_dir)
    connection = getattr(args, "connection", None)  # add/remove: the TLS and credential arguments given
    return dataclasses.replace(served, connection=connection) if connection is not None and connection.given \
        else served


def _render(args: argparse.Namespace) -> int:
    if args.from_config:
        config = load_model_server_config(args.from_config)
        if args.base_path_prefix != CONTAINER_MODELS_DIR:
            config = remap_base_paths(config, {CONTAINER_MODELS_DIR: args.base_path_prefix})
    elif args.zoo or args.all:
        config = render_model_server_config(ZOO, base_path_prefix=args.base_path_prefix,
                                            models_dir=args.model_repo)
    else:
        config = _served(args).load()
    if args.all:
        gpu_file, cpu_file = (args.serving_dir / CONFIG_FILES[v][0] for v in ("gpu", "cpu"))
        write_model_server_config(config, gpu_file)
        write_model_server_config(without_gpu_only(config), cpu_file, header=CPU_HEADER)
        print(f"wrote {gpu_file} and {cpu_file}")
        return 0
    if args.without_gpu_only:
        config = without_gpu_only(config)
    if args.out:
        write_model_server_config(config, args.out)
        print(f"wrote {args.out}")
    else:
        sys.stdout.write(format_model_server_config(config))
    return 0


def _new_entry(args: argparse.Namespace, served: ServedConfig):
    """The ``ModelConfig`` ``add`` asks for; ValueError naming what is wrong with it."""
    problem = model_name_problem(args.name)
    if problem is not None:
        raise ValueError(problem)
    base_dir = args.base_path.resolve()
    on_disk = model_versions(base_dir)
    labels = parse_labels(args.labels)
    rolled_back = rolled_back_versions(base_dir)
    if args.version is not None:
        if args.policy is not None or labels:
            raise ValueError("--version N serves N with stable and canary on it: give it without --policy "
                             "and --label")
        policy, labels = VersionPolicy("specific", versions=(args.version,)), dict.fromkeys(LABELS, args.version)
    elif args.policy is not None:
        policy = VersionPolicy.parse(args.policy)
    elif labels:
        policy = VersionPolicy("specific", versions=tuple(sorted(set(labels.values()))))
    else:  # as make up serves every model: the newest version not rolled back, stable and canary on it
        newest = stable_version(base_dir)
        if newest is None and on_disk:
            raise ValueError(f"every version of {base_dir} was rolled back ({sorted(rolled_back)}; "
                             f"{base_dir / ROLLED_BACK_FILE}): name the one to serve with --version N")
        policy = VersionPolicy("specific", versions=(newest,) if newest is not None else ())
        labels = dict.fromkeys(LABELS, newest) if newest is not None else {}
    if policy.kind != "specific":
        again = sorted(set(policy.served(on_disk)) & set(rolled_back))
        if again:
            raise ValueError(f"policy {args.policy} would serve version(s) {again}, which were rolled back "
                             f"({base_dir / ROLLED_BACK_FILE}); TF Serving would serve them as the newest: "
                             "pin the versions with --version N or --policy versions:...")
    entry = model_entry(args.name, served.base_path_for(base_dir), policy, labels)
    problems = served.entry_problems(entry)
    if problems:
        raise ValueError("; ".join(problems))
    return entry


def _asked_for_by_number(args: argparse.Namespace, entry) -> None:
    """A rolled-back version the operator named as stable is served again: its marker goes."""
    if "stable" not in entry.version_labels or (args.version is None and not args.labels):
        return
    version, base_dir = entry.version_labels["stable"], args.base_path.resolve()
    if reinstate(base_dir, version):
        print(f"{args.name}: version {version} had been rolled back; served as stable as asked "
              f"(its mark in {base_dir / ROLLED_BACK_FILE} is cleared)")


def _edit(args: argparse.Namespace) -> int:
    served = _served(args)
    try:
        snapshot = served.snapshot()
        if args.command == "add":
            entry = _new_entry(args, served)
            on_disk = served.versions_on_disk(entry)

            def plan(config):
                return add_steps(config, entry, on_disk)
        else:
            def plan(config):
                find_entry(config, args.name)
                _check_not_last(config, args)
                return remove_steps(config, args.name)
        # Another command's change since the read is kept: add and remove are planned again on it (an add
        # of a name taken since, or a remove of a model gone since, is then refused by the plan itself).
        pushed = change_served_config(
            served, args.name, plan, snapshot=snapshot, timeout=args.timeout,
            who=f"serving.config {args.command} {args.name}",
            on_done=lambda: _record_removal(served, args.name, removed=args.command == "remove"))
        if args.command == "add":
            _asked_for_by_number(args, entry)
    except (StaleConfig, LockTimeout) as exc:
        print(f"{args.command} refused: {exc}", file=sys.stderr)
        return EXIT_STALE
    except (ValueError, KeyError, OSError, ReloadError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) else exc
        print(f"{args.command} refused: {message}; {served.path} unchanged by this command",
              file=sys.stderr)
        return 1
    where = (f"served by {served.grpc}" if pushed else
             f"no server answers at {served.grpc}: the stack serves it from its next start")
    print(f"{'added' if args.command == 'add' else 'removed'} {args.name} "
          f"{'to' if args.command == 'add' else 'from'} {served.path} ({where})")
    return 0


def _check_not_last(config, args: argparse.Namespace) -> None:
    """Removing the last model leaves a server that serves nothing: refused without ``--force``."""
    if len(config.model_config_list.config) > 1:
        return
    consequence = ("the server then serves no model: every request is NOT_FOUND and the stack's health check, "
                   "which asks for the served config's models, fails")
    if not args.force:
        raise ValueError(f"{args.name} is the last model served; {consequence}. Add another model first, or "
                         "remove it anyway with --force")
    print(f"warning: removing the last model, {args.name}: {consequence}", file=sys.stderr)


def _record_removal(served: ServedConfig, name: str, *, removed: bool) -> None:
    """On the stack's own config, remember removals so that make up does not add the model back."""
    path = served.state_file
    state = read_state(path) if path else None
    if state is None or path is None:
        return
    names = [n for n in state.removed if n != name] + ([name] if removed else [])
    write_state(state.replace(removed=tuple(names)), path)


def _add_target_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config-file", type=Path, default=None,
                   help="the models config (default: the one the stack serves, named by make up's "
                        "stack.json; without one, <checkout>/serving/models.config)")
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR,
                   help=f"make up's work directory, whose stack.json names the served config "
                        f"(default: {DEFAULT_WORK_DIR})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m serving.config", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="parse and cross-check the config files")
    render = sub.add_parser("render", help="print the served models config, or write one from the zoo "
                                           "or another config")
    add = sub.add_parser("add", help="serve a model (any SavedModel directory with numeric versions)")
    remove = sub.add_parser("remove", help="stop serving a model")
    for p in (check, render):
        p.add_argument("--serving-dir", type=Path, default=SERVING_DIR,
                       help=f"directory of the config files (default: {SERVING_DIR})")
        p.add_argument("--base-path-prefix", default=CONTAINER_MODELS_DIR,
                       help=f"directory the base paths live in (default: {CONTAINER_MODELS_DIR}, the container's)")
    for p in (check, render, add, remove):
        p.add_argument("--model-repo", type=Path, metavar="DIR",
                       help="model repository (the host directory mounted at /models)")
        _add_target_options(p)
    for p in (add, remove):
        p.add_argument("name", metavar="NAME", help="the model's name, as clients call it")
        p.add_argument("--grpc", metavar="HOST:PORT", default=None, type=grpc_address,
                       help="the server to push to (default: the stack's, else 127.0.0.1:8500)")
        p.add_argument("--timeout", type=float, default=600.0,
                       help="seconds to wait for the versions to load (default: 600)")
        add_connection_arguments(p)  # default: the stack's CA and admin key (make certs)
    add.add_argument("--base-path", type=Path, required=True, metavar="DIR",
                     help="the model's directory on this host (numeric version subdirectories)")
    add.add_argument("--policy", metavar="POLICY",
                     help="latest:N, all or versions:1,2 (default: versions: the labelled versions, "
                          "or the newest version with stable and canary on it)")
    add.add_argument("--label", dest="labels", action="append", default=[], metavar="NAME=N",
                     help="version label, e.g. stable=1 (repeatable)")
    add.add_argument("--version", type=int, metavar="N", default=None,
                     help="serve version N with stable and canary on it (default: the newest version that "
                          "was not rolled back; naming a rolled-back version serves it again)")
    remove.add_argument("--force", action="store_true",
                        help="remove the last model too (the server then serves nothing and the health "
                             "check fails)")
    check.add_argument("--variant", choices=sorted(CONFIG_FILES), default="gpu",
                       help="whose models config --model-repo must satisfy (default: gpu)")
    render.add_argument("--zoo", action="store_true", help="render the zoo's models (what render --all writes)")
    render.add_argument("--from-config", type=Path,
                        help="start from this models config (keeps policies and labels) instead of the zoo")
    render.add_argument("--without-gpu-only", action="store_true", help="drop TensorRT models (CPU hosts)")
    render.add_argument("--all", action="store_true",
                        help="write both models.config and models.cpu.config from the zoo into --serving-dir")
    render.add_argument("--out", type=Path, help="output file (default: stdout)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if hasattr(args, "root_certificates"):
        try:
            args.connection = connection_from_args(args)
        except ValueError as exc:
            parser.error(str(exc))
    if args.command == "check":
        return _check(args)
    if args.command == "render":
        return _render(args)
    return _edit(args)
