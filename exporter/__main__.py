"""``python -m exporter``: export, ensure and validate zoo models.

Exit codes: 0 success; 1 validation or export failure; 2 usage error;
3 the variant cannot be built on this machine (e.g. trt-fp16 without a GPU
and TensorRT) — checked before any work, nothing is written.

``--model-repo DIR`` is the model repository (default ``<checkout>/models``,
anchored on the checkout, not the current directory).
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Optional, Sequence

from exporter.export import ExportError, ensure_model, export_model
from exporter.validate import ValidationError, validate
from exporter.variants import VARIANTS, VariantUnavailable
from exporter.zoo import MODELS
from serving.model_repo import VersionExists

__all__ = ["main", "build_parser", "DEFAULT_MODEL_REPO", "EXIT_FAILED", "EXIT_UNAVAILABLE"]

DEFAULT_MODEL_REPO = Path(__file__).resolve().parents[1] / "models"
EXIT_FAILED = 1
EXIT_UNAVAILABLE = 3


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--variant", choices=list(VARIANTS), default="fp32")
    p.add_argument("--model-repo", type=Path, default=DEFAULT_MODEL_REPO, metavar="DIR",
                   help=f"model repository (default: {DEFAULT_MODEL_REPO})")
    p.add_argument("--batching-config", type=Path, default=None,
                   help="BatchingParameters text proto whose allowed_batch_sizes the warmup covers "
                        "(default: <checkout>/serving/batching.config, else 1,2,4,8,16,32)")
    p.add_argument("--quiet", action="store_true", help="no progress output")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m exporter", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="export one model as a new version")
    export.add_argument("--model", required=True, choices=list(MODELS))
    export.add_argument("--version", type=int, default=None, metavar="N", help="default: the next integer")
    _add_common(export)
    ensure = sub.add_parser("ensure", help="export version 1 of each model that has no version yet")
    ensure.add_argument("models", nargs="+", choices=list(MODELS), metavar="NAME")
    _add_common(ensure)
    check = sub.add_parser("validate", help="check a version directory against its manifest")
    check.add_argument("path", type=Path, help="a version directory, or a model directory (latest version)")
    return parser


def _export(args: argparse.Namespace) -> int:
    path = export_model(args.model, variant=args.variant, version=args.version, out=args.model_repo,
                        progress=not args.quiet, batching_config=args.batching_config)
    print(path)
    return 0


def _ensure(args: argparse.Namespace) -> int:
    for name in args.models:
        path = ensure_model(name, variant=args.variant, out=args.model_repo, progress=not args.quiet,
                            batching_config=args.batching_config)
        print(path if path else f"{name}: already has a version under {args.model_repo}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    report = validate(args.path)
    print(f"OK {report.path} ({report.variant}): signatures {', '.join(report.signatures)}")
    for sig, measures in sorted(report.golden.items()):
        top1 = measures["top1_agreement"]
        print(f"  golden {sig}: max abs error {measures['max_abs_error']:.3g}"
              + ("" if top1 is None else f", top-1 agreement {top1:.3f}"))
    print(f"  warmup: {report.warmup_records} records, batch sizes {report.warmup_batch_sizes}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI; return the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return {"export": _export, "ensure": _ensure, "validate": _validate}[args.command](args)
    except VariantUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except ValidationError as exc:
        print(f"validation failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except (ExportError, VersionExists, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
