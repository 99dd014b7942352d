"""Validate a published version directory against its manifest.

Checks, in order: the SavedModel's signatures equal the manifest's (keys,
method names, dtypes, shapes, batch dimension -1 on every input); the golden
inputs replayed through the loaded model give the golden outputs (FP32:
tight tolerance; reduced precision: loose tolerance plus top-1 agreement,
both reported); the warmup file parses as ``PredictionLog`` records whose
requests name a real signature with its input keys, dtypes and shapes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Union

from exporter import warmup
from exporter.compare import compare_outputs
from exporter.manifest import Manifest, load_manifest
from exporter.signatures import describe_signatures
from exporter.variants import get_variant
from serving.codec import DEFAULT_SIGNATURE, Signature, TensorSpec, dtype_from_enum, tensor_proto_to_ndarray

if TYPE_CHECKING:  # annotations only: importing this module loads no TensorFlow
    from tensorflow_serving.apis import predict_pb2

__all__ = ["ValidationError", "ValidationReport", "validate", "resolve_version_dir"]


class ValidationError(Exception):
    """The version directory does not match its manifest; ``problems`` lists every mismatch."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: {len(problems)} problem(s):\n" + "\n".join(f"  - {p}" for p in problems))


@dataclass
class ValidationReport:
    """What was checked and measured; raised as ValidationError when ``problems``."""

    path: Path
    variant: str = ""
    signatures: list[str] = field(default_factory=list)
    golden: dict[str, dict[str, Any]] = field(default_factory=dict)
    warmup_records: int = 0
    warmup_batch_sizes: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def resolve_version_dir(path: Union[str, Path]) -> Path:
    """``path`` itself if it holds a SavedModel, else its highest numeric version."""
    path = Path(path)
    if (path / "saved_model.pb").is_file():
        return path
    versions = sorted((int(p.name) for p in path.iterdir() if p.is_dir() and p.name.isdigit()),
                      reverse=True) if path.is_dir() else []
    if not versions:
        raise FileNotFoundError(f"{path} holds no saved_model.pb and no numeric version directory")
    return path / str(versions[0])


def _check_tensors(where: str, want: Mapping[str, TensorSpec], got: Mapping[str, TensorSpec]) -> list[str]:
    if set(want) != set(got):
        return [f"{where}: keys are {sorted(got)}, manifest says {sorted(want)}"]
    return [f"{where}[{key!r}]: saved model has {got[key].dtype_name} {list(got[key].dims or [])}, "
            f"manifest says {want[key].dtype_name} {list(want[key].dims or [])}"
            for key in sorted(want)
            if (want[key].dtype_enum, want[key].shape) != (got[key].dtype_enum, got[key].shape)]


def check_signatures(manifest: Manifest, actual: Mapping[str, Signature]) -> list[str]:
    """Mismatches between the SavedModel's signatures and the manifest's."""
    problems = []
    if set(actual) != set(manifest.signatures):
        problems.append(f"signatures are {sorted(actual)}, manifest says {sorted(manifest.signatures)}")
    for name in sorted(set(actual) & set(manifest.signatures)):
        want, got = manifest.signatures[name], actual[name]
        if want.method_name != got.method_name:
            problems.append(f"signature {name!r}: method_name {got.method_name!r}, manifest says {want.method_name!r}")
        problems += _check_tensors(f"signature {name!r} inputs", want.inputs, got.inputs)
        problems += _check_tensors(f"signature {name!r} outputs", want.outputs, got.outputs)
        for key, tensor in got.inputs.items():
            if not tensor.shape or tensor.shape[0] is not None:
                problems.append(f"signature {name!r} input {key!r} has shape {tensor.dims}; "
                                "the batch dimension must be -1")
    return problems


def check_golden(manifest: Manifest, version_dir: Path, report: ValidationReport) -> list[str]:
    """Replay golden inputs through the loaded SavedModel; compare with the variant's tolerance."""
    import tensorflow as tf  # TensorFlow: only when the golden data is replayed

    variant = get_variant(manifest.variant)
    tolerance = manifest.tolerance or variant.tolerance
    loaded = tf.saved_model.load(str(version_dir))
    problems = []
    for sig, golden in sorted(manifest.golden.items()):
        if sig not in loaded.signatures:
            problems.append(f"golden data for signature {sig!r}, which the saved model lacks")
            continue
        try:
            outputs = loaded.signatures[sig](**{k: tf.constant(v) for k, v in golden.inputs.items()})
        except (TypeError, ValueError, tf.errors.OpError) as exc:
            problems.append(f"golden {sig!r}: the saved model rejects the golden inputs: {exc}")
            continue
        actual = {k: v.numpy() for k, v in outputs.items()}
        comparison = compare_outputs(golden.outputs, actual, tolerance,
                                     top1_key=manifest.top1_outputs.get(sig),
                                     reduced_precision=variant.reduced_precision)
        report.golden[sig] = comparison.as_dict()
        problems += [f"golden {sig!r}: {p}" for p in comparison.problems]
    return problems


def check_warmup(manifest: Manifest, version_dir: Path, report: ValidationReport) -> list[str]:
    """The warmup file parses and each request fits its signature."""
    path = warmup.warmup_path(version_dir)
    if not path.is_file():
        return [f"no warmup file at {path}"]
    try:
        records = warmup.read_warmup(version_dir)
    except Exception as exc:  # a corrupt TFRecord or proto: report, don't crash
        return [f"warmup file {path} does not parse as PredictionLog records: {exc}"]
    report.warmup_records = len(records)
    problems = [] if len(records) <= warmup.MAX_RECORDS else [
        f"warmup file has {len(records)} records; TF Serving accepts at most {warmup.MAX_RECORDS}"]
    sizes = set()
    for i, record in enumerate(records):
        if record.WhichOneof("log_type") != "predict_log":
            problems.append(f"warmup record {i} is a {record.WhichOneof('log_type')}, expected predict_log")
            continue
        problems += _check_request(i, record.predict_log.request, manifest, sizes)
    report.warmup_batch_sizes = sorted(sizes)
    expected = manifest.warmup.get("batch_sizes")
    if expected is not None and sorted(sizes) != sorted(expected):
        problems.append(f"warmup covers batch sizes {sorted(sizes)}, manifest says {sorted(expected)}")
    return problems


def _check_request(i: int, request: "predict_pb2.PredictRequest", manifest: Manifest,
                   sizes: set[int]) -> list[str]:
    name = request.model_spec.signature_name or DEFAULT_SIGNATURE
    signature = manifest.signatures.get(name)
    if signature is None:
        return [f"warmup record {i} asks for signature {name!r}, which the model lacks"]
    if set(request.inputs) != set(signature.inputs):
        return [f"warmup record {i} ({name}) has inputs {sorted(request.inputs)}, "
                f"signature wants {sorted(signature.inputs)}"]
    problems, batch = [], set()
    for key, proto in request.inputs.items():
        spec = signature.inputs[key]
        dtype = dtype_from_enum(proto.dtype).name
        shape = tensor_proto_to_ndarray(proto).shape
        if dtype != spec.dtype_name or not spec.accepts_shape(shape):
            problems.append(f"warmup record {i} ({name}) input {key!r} is {dtype} {list(shape)}, "
                            f"signature wants {spec.dtype_name} {list(spec.dims or [])}")
        batch.add(shape[0] if shape else None)
    if len(batch) != 1:
        problems.append(f"warmup record {i} ({name}) inputs disagree on the batch size: {sorted(batch, key=str)}")
    sizes.update(b for b in batch if b is not None)
    return problems


def validate(path: Union[str, Path]) -> ValidationReport:
    """Validate a version directory (or a model directory: its latest version).

    Returns the report; raises :class:`ValidationError` listing every problem.
    """
    version_dir = resolve_version_dir(path)
    manifest = load_manifest(version_dir)
    report = ValidationReport(path=version_dir, variant=manifest.variant)
    actual = describe_signatures(version_dir)
    report.signatures = sorted(actual)
    report.problems += check_signatures(manifest, actual)
    report.problems += check_golden(manifest, version_dir, report)
    report.problems += check_warmup(manifest, version_dir, report)
    if report.problems:
        raise ValidationError(version_dir, report.problems)
    return report
