"""``python -m serving.config``: check and render the TF Serving config files.

``check`` parses every file in ``serving/`` with the real TF Serving protos and
verifies that model names and base paths match what the exporter publishes
(and, with ``--model-repo``, that the exported versions are there).
``render`` writes ``models.config`` from the zoo's published names, or from an
existing config with its base paths remapped (e.g. for the embedded server).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from google.protobuf.message import Message

from serving.config import load_batching_parameters, load_model_server_config, load_monitoring_config
from serving.config.checks import check_batching_parameters, check_monitoring_config, check_warmup_fits
from serving.config.models import (
    CONTAINER_MODELS_DIR,
    HEADER,
    check_in_sync,
    check_model_dirs,
    check_model_server_config,
    format_model_server_config,
    remap_base_paths,
    render_model_server_config,
    without_gpu_only,
    write_model_server_config,
)
from serving.model_repo import ZOO

__all__ = ["main", "build_parser", "check_serving_dir", "CONFIG_FILES"]

SERVING_DIR = Path(__file__).resolve().parents[1]  # the checkout's serving/, whatever the current directory

# Variant → (models config, batching config) in the serving directory.
CONFIG_FILES = {
    "gpu": ("models.config", "batching.config"),
    "cpu": ("models.cpu.config", "batching.cpu.config"),
}
MONITORING_FILE = "monitoring.config"
CPU_HEADER = HEADER + ("# CPU variant (docker-compose.cpu.yml, make up without a GPU): models.config without the\n"
                       "# TensorRT models. `python -m serving.config check` fails when the two drift apart.\n")


def check_serving_dir(serving_dir: Path, *, models_dir: Optional[Path] = None,
                      variant: str = "gpu",
                      base_path_prefix: str = CONTAINER_MODELS_DIR) -> list[str]:
    """Every problem with the config files in ``serving_dir``; empty when all are fine.

    ``models_dir`` additionally checks the exported repository that the
    ``variant``'s models config serves (``/models/<name>`` → ``models_dir/<name>``).
    """
    problems: list[str] = []
    configs, batching = {}, {}
    for name, (models_file, batching_file) in CONFIG_FILES.items():
        configs[name] = _parsed(serving_dir / models_file, load_model_server_config, problems)
        if configs[name] is not None:
            problems += [f"{models_file}: {p}" for p in check_model_server_config(
                configs[name], base_path_prefix=base_path_prefix, include_gpu_only=name == "gpu")]
        batching[name] = _parsed(serving_dir / batching_file, load_batching_parameters, problems)
        if batching[name] is not None:
            problems += [f"{batching_file}: {p}" for p in check_batching_parameters(batching[name])]
    if all(batching.values()):
        warmup_sizes = list(batching["gpu"].allowed_batch_sizes)  # what the exporter warms up
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


def _check(args: argparse.Namespace) -> int:
    problems = check_serving_dir(args.serving_dir, models_dir=args.model_repo, variant=args.variant,
                                 base_path_prefix=args.base_path_prefix)
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    if problems:
        return 1
    checked = "config files" + (f" and the {args.variant} models in {args.model_repo}" if args.model_repo else "")
    print(f"OK {args.serving_dir}: {checked} match the exporter's published names")
    return 0


def _render(args: argparse.Namespace) -> int:
    if args.from_config:
        config = load_model_server_config(args.from_config)
        if args.base_path_prefix != CONTAINER_MODELS_DIR:
            config = remap_base_paths(config, {CONTAINER_MODELS_DIR: args.base_path_prefix})
    else:
        config = render_model_server_config(ZOO, base_path_prefix=args.base_path_prefix,
                                            models_dir=args.model_repo)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m serving.config", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="parse and cross-check the config files")
    render = sub.add_parser("render", help="write models.config from the zoo or another config")
    for p in (check, render):
        p.add_argument("--serving-dir", type=Path, default=SERVING_DIR,
                       help=f"directory of the config files (default: {SERVING_DIR})")
        p.add_argument("--model-repo", type=Path, metavar="DIR",
                       help="model repository (the host directory mounted at /models)")
        p.add_argument("--base-path-prefix", default=CONTAINER_MODELS_DIR,
                       help=f"directory the base paths live in (default: {CONTAINER_MODELS_DIR}, the container's)")
    check.add_argument("--variant", choices=sorted(CONFIG_FILES), default="gpu",
                       help="whose models config --model-repo must satisfy (default: gpu)")
    render.add_argument("--from-config", type=Path,
                        help="start from this models config (keeps policies and labels) instead of the zoo")
    render.add_argument("--without-gpu-only", action="store_true", help="drop TensorRT models (CPU hosts)")
    render.add_argument("--all", action="store_true",
                        help="write both models.config and models.cpu.config into --serving-dir")
    render.add_argument("--out", type=Path, help="output file (default: stdout)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return _check(args) if args.command == "check" else _render(args)
