"""The target-model options every ``python -m loadtest`` subcommand shares, and the ``Target`` they give.

The spellings are the project's CLI vocabulary: ``--version N`` / ``--label
NAME`` for a version, ``--model-repo DIR`` for the model repository (default
``<checkout>/models``).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from loadtest import DEFAULT_MODEL_REPO
from loadtest.payloads import Target

__all__ = ["add_target_arguments", "targets_from_args"]


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """``--model``, ``--variant``, ``--signature``, ``--version``/``--label``, ``--batch-size``, ``--model-repo``."""
    group = parser.add_argument_group("target model")
    group.add_argument("--model", default="digits", help="model name (default digits)")
    group.add_argument("--variant", default="fp32", help="fp32 | xla | trt-fp16 (sweep: comma list)")
    group.add_argument("--signature", default=None, help="signature name (default serving_default)")
    which = group.add_mutually_exclusive_group()
    which.add_argument("--version", type=int, default=None, metavar="N", help="a specific version (default: latest)")
    which.add_argument("--label", default=None, metavar="NAME", help="a version label, e.g. stable")
    group.add_argument("--batch-size", type=int, default=1, help="rows per request")
    group.add_argument("--model-repo", type=Path, default=DEFAULT_MODEL_REPO, metavar="DIR",
                       help=f"model repository with <name>/<version>/manifest.json (default {DEFAULT_MODEL_REPO})")


def targets_from_args(args: argparse.Namespace) -> list[Target]:
    """One ``Target`` per variant of ``--variant`` (a comma list)."""
    return [Target(model=args.model, variant=variant, signature=args.signature, version=args.version,
                   version_label=args.label, batch_size=args.batch_size, model_repo=args.model_repo)
            for variant in args.variant.split(",")]
