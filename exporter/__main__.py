"""``python -m exporter``: export any model or a zoo model; validate and inspect any SavedModel.

- ``export --from PATH|module:factory --name NAME``: a user's model (a
  SavedModel directory, a ``.keras`` file, or ``module:factory`` whose call
  returns a Keras model or a ``tf.Module``); ``--input NAME:DTYPE:SHAPE``
  fixes an input (SHAPE: the dimensions after the batch), ``--samples FILE``
  (``.npz``, REST JSON, or a request capture file or directory, with
  ``--since``/``--until``) gives the goldens and warmup rows, ``--variant``
  (repeatable) the variants, ``--atol/--rtol/--min-top1`` their tolerance.
- ``export --model NAME``: a zoo model.
- ``ensure NAME...``: version 1 of each zoo model that has none.
- ``validate PATH``: a TF1 Session check of any SavedModel (with a manifest: its goldens and warmup).
- ``inspect PATH [--json]``: signatures, warmup and manifest.

Exit codes: 0 success; 1 refused, export or validation failure (the message
says why; nothing published for the failing variant); 2 usage error (a
capture that is empty, unreadable or does not fit the model included); 3 the
variant cannot be built on this machine (e.g. trt-fp16 without a GPU and
TensorRT) — checked before any work, nothing is written.

``--model-repo DIR`` is the model repository (default ``<checkout>/models``,
anchored on the checkout, not the current directory).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Optional, Sequence

from exporter.capture_source import CaptureSourceError, add_window_arguments, is_capture_source, window_from_args
from exporter.export import DEFAULT_MODEL_REPO, ExportError, VariantFailed, ensure_model, export, export_model
from exporter.inspection import format_report, inspect_saved_model
from exporter.samples import CaptureSamples
from exporter.sources import load_from, parse_input
from exporter.validate import ValidationError, ValidationReport, validate
from exporter.variants import VARIANTS, VariantUnavailable
from exporter.zoo import MODELS
from serving.codec import parse_shape
from serving.model_repo import VersionExists

__all__ = ["main", "build_parser", "DEFAULT_MODEL_REPO", "EXIT_FAILED", "EXIT_UNAVAILABLE"]

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3


def _add_repo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-repo", type=Path, default=DEFAULT_MODEL_REPO, metavar="DIR",
                   help=f"model repository (default: {DEFAULT_MODEL_REPO})")
    p.add_argument("--batching-config", type=Path, default=None,
                   help="BatchingParameters text proto whose allowed_batch_sizes the warmup covers "
                        "(default: <checkout>/serving/batching.config, else 1,2,4,8,16,32)")
    p.add_argument("--quiet", action="store_true", help="no progress output")


def _input_arg(text: str) -> object:
    try:
        return parse_input(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _shape_arg(text: str) -> object:
    try:
        return parse_shape(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_export(sub: argparse._SubParsersAction) -> None:
    export_p = sub.add_parser("export", help="export a model (yours with --from, a zoo one with --model) "
                                             "as a new version")
    source = export_p.add_mutually_exclusive_group(required=True)
    source.add_argument("--from", dest="source", metavar="PATH|module:factory",
                        help="a SavedModel directory, a .keras file, or module:factory (called with no "
                             "arguments, returns a Keras model or a tf.Module)")
    source.add_argument("--model", choices=list(MODELS), help="a zoo model")
    export_p.add_argument("--name", help="the model's name, its directory under --model-repo (with --from)")
    export_p.add_argument("--input", dest="inputs", action="append", default=[], type=_input_arg,
                          metavar="NAME:DTYPE:SHAPE",
                          help="an input's dtype and dimensions after the batch, e.g. ids:int64:16 "
                               "(the batch dimension is always -1); repeatable")
    export_p.add_argument("--samples", type=Path, metavar="FILE|CAPTURE",
                          help="sample inputs (.npz by input name, a TF Serving REST Predict body .json, or a "
                               "request capture: a capture file or directory, with --since/--until): the goldens "
                               "and warmup rows (default: synthesized from the signature)")
    add_window_arguments(export_p, "--samples")
    export_p.add_argument("--signature", dest="signatures", action="append", default=None, metavar="KEY",
                          help="serve only this signature of the model; repeatable (default: all)")
    export_p.add_argument("--variant", dest="variants", action="append", choices=list(VARIANTS), default=None,
                          help="fp32 (default), xla, trt-fp16; repeatable, fp32 is exported first")
    export_p.add_argument("--version", type=int, default=None, metavar="N", help="default: the next integer")
    export_p.add_argument("--atol", type=float, help="absolute tolerance of float outputs (every variant)")
    export_p.add_argument("--rtol", type=float, help="relative tolerance of float outputs (every variant)")
    export_p.add_argument("--min-top1", type=float, help="least top-1 agreement with fp32 (reduced precision)")
    _add_repo(export_p)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m exporter", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _add_export(sub)
    ensure = sub.add_parser("ensure", help="export version 1 of each zoo model that has no version yet")
    ensure.add_argument("models", nargs="+", choices=list(MODELS), metavar="NAME")
    ensure.add_argument("--variant", choices=list(VARIANTS), default="fp32")
    _add_repo(ensure)
    check = sub.add_parser("validate", help="run a SavedModel in a TF1 Session like TF Serving; with a "
                                            "manifest, check its goldens and warmup")
    check.add_argument("path", type=Path, help="a version directory, or a model directory (latest version)")
    check.add_argument("--shape", dest="shapes", action="append", default=[], type=_shape_arg,
                       metavar="NAME:d1,d2", help="an input's dimensions after the batch where the SavedModel "
                                                   "leaves one unknown (no manifest); repeatable")
    show = sub.add_parser("inspect", help="signatures, dtypes, shapes, method names, warmup and manifest")
    show.add_argument("path", type=Path, help="a version directory, or a model directory (latest version)")
    show.add_argument("--json", action="store_true", help="print JSON instead of text")
    return parser


def _export(args: argparse.Namespace) -> int:
    variants = args.variants or ["fp32"]
    if args.model:
        extra = [flag for flag, value in (("--name", args.name), ("--input", args.inputs),
                                          ("--samples", args.samples), ("--signature", args.signatures),
                                          ("--atol", args.atol), ("--rtol", args.rtol),
                                          ("--min-top1", args.min_top1)) if value]
        if extra:
            raise ValueError(f"{', '.join(extra)} only apply to --from (a zoo model fixes its own)")
        for variant in sorted(dict.fromkeys(variants), key=lambda v: v != "fp32"):
            print(export_model(args.model, variant=variant, version=args.version, out=args.model_repo,
                               progress=not args.quiet, batching_config=args.batching_config))
        return 0
    if not args.name:
        raise ValueError("--from needs --name NAME: the name the model is served under")
    model = load_from(args.source)
    sample_inputs = _samples(args)
    tolerance = {k: v for k, v in (("atol", args.atol), ("rtol", args.rtol), ("min_top1", args.min_top1))
                 if v is not None}
    try:
        paths = export(model, name=args.name, out=args.model_repo, sample_inputs=sample_inputs,
                       signatures=args.signatures, inputs=args.inputs, variants=variants, version=args.version,
                       tolerance=tolerance or None, batching_config=args.batching_config,
                       progress=not args.quiet)
    except VariantFailed as exc:
        for path in exc.published.values():
            print(path)
        raise
    for path in paths.values():
        print(path)
    return 0


def _samples(args: argparse.Namespace) -> object:
    """``--samples`` as ``export`` takes it: a capture (with its window) or a file of arrays."""
    window = window_from_args(args)
    if args.samples is not None and is_capture_source(args.samples):
        return CaptureSamples(args.samples, window)
    if args.since is not None or args.until is not None:
        raise CaptureSourceError("--since/--until select requests of a capture: give --samples a capture file "
                                 "or directory")
    return args.samples


def _ensure(args: argparse.Namespace) -> int:
    for name in args.models:
        path = ensure_model(name, variant=args.variant, out=args.model_repo, progress=not args.quiet,
                            batching_config=args.batching_config)
        print(path if path else f"{name}: already has a version under {args.model_repo}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    report = validate(args.path, shapes=dict(args.shapes))
    _print_report(report)
    return 0


def _print_report(report: ValidationReport) -> None:
    if not report.has_manifest:
        print(f"OK {report.path} (no manifest; synthetic inputs in a TF1 Session): "
              f"signatures {', '.join(report.signatures)}")
        for sig, outputs in report.ran.items():
            print(f"  ran {sig}: " + ", ".join(f"{k} {shape}" for k, shape in outputs.items()))
    else:
        print(f"OK {report.path} ({report.variant}): signatures {', '.join(report.signatures)}")
        for sig, measures in sorted(report.golden.items()):
            top1 = measures["top1_agreement"]
            print(f"  golden {sig} (TF1 Session): max abs error {measures['max_abs_error']:.3g}"
                  + ("" if top1 is None else f", top-1 agreement {top1:.3f}"))
    for sig, why in sorted(report.skipped.items()):
        print(f"  skipped {sig}: {why}")
    for note in report.notes:
        print(f"  note: {note}")
    if report.has_manifest or report.warmup_records:
        print(f"  warmup: {report.warmup_records} records, batch sizes {report.warmup_batch_sizes}")


def _inspect(args: argparse.Namespace) -> int:
    info = inspect_saved_model(args.path)
    print(json.dumps(info, indent=2) if args.json else format_report(info), end="" if not args.json else "\n")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI; return the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    commands = {"export": _export, "ensure": _ensure, "validate": _validate, "inspect": _inspect}
    try:
        return commands[args.command](args)
    except CaptureSourceError as exc:   # a capture that cannot be replayed here: a usage error
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
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
