"""Validate a SavedModel the way TF Serving will run it: a TF1 Session, then its manifest if it has one.

Every replay goes through :func:`run_in_session`: the SavedModel loaded as
TF Serving's ``SavedModelBundle`` loader does (``saved_model.loader.load`` in
a fresh ``Graph`` and ``Session``, tags ``{"serve"}``) and each signature run
by its tensor names. A SavedModel that ``tf.saved_model.load`` accepts can
still fail there: Keras 3's ``tf.saved_model.save(model)`` writes one whose
every predict fails with "Could not find variable" (tensorflow/serving#2250);
:data:`KERAS3_FIX` is the advice for it.

With a manifest, checks in order: the SavedModel's signatures equal the
manifest's (keys, method names, dtypes, shapes, batch dimension -1 on every
input); the golden inputs replayed through the Session give the golden
outputs (FP32: tight tolerance; reduced precision: loose tolerance plus
top-1 agreement, both reported); the warmup file parses as
``PredictionLog`` records whose requests name a real signature with its
input keys, dtypes and shapes. Without one (a SavedModel the exporter did
not write), every predict signature runs on inputs synthesized from its
specs (``serving.codec.synthesize_inputs``; ``shapes`` gives unknown
dimensions) and a warmup file, if present, is checked against the signatures.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional, Sequence, Union

import numpy as np

from exporter import warmup
from exporter.compare import compare_outputs
from exporter.manifest import MANIFEST_FILE, Manifest, load_manifest
from exporter.signatures import describe_signatures
from exporter.variants import get_variant
from serving.codec import (
    DEFAULT_SIGNATURE,
    JSON,
    PREDICT_METHOD_NAME,
    Signature,
    TensorSpec,
    dtype_from_enum,
    synthesize_inputs,
    tensor_proto_to_ndarray,
)

if TYPE_CHECKING:  # annotations only: importing this module loads no TensorFlow
    from types import ModuleType

    from tensorflow.compat import v1 as tf_v1
    from tensorflow.core.protobuf import meta_graph_pb2
    from tensorflow_serving.apis import predict_pb2

__all__ = [
    "ValidationError",
    "ValidationReport",
    "SessionReplay",
    "KERAS3_FIX",
    "SYNTHETIC_BATCH",
    "validate",
    "resolve_version_dir",
    "run_in_session",
    "session_problem",
]

KERAS3_FIX = ("This is what Keras 3's tf.saved_model.save(model) writes: its signatures read variables that a "
              "TF1 Session, TF Serving's loader, does not restore (tensorflow/serving#2250). Export with "
              "model.export(path), or pass the Keras model itself to exporter.export")
SYNTHETIC_BATCH = 2  # rows per signature when a SavedModel without a manifest is checked


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
    golden: dict[str, dict[str, JSON]] = field(default_factory=dict)
    warmup_records: int = 0
    warmup_batch_sizes: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    has_manifest: bool = True
    ran: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # no manifest: output shapes by signature
    skipped: dict[str, str] = field(default_factory=dict)               # signature → why it was not run
    notes: list[str] = field(default_factory=list)


@dataclass
class SessionReplay:
    """What a TF1 Session made of some inputs: outputs by signature, or why it failed.

    ``load_error`` is set when the SavedModel did not load (then nothing
    ran); ``errors`` holds per-signature failures.
    """

    outputs: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    load_error: Optional[str] = None


def run_in_session(saved_model_dir: Union[str, Path], inputs: Mapping[str, Mapping[str, np.ndarray]],
                   tags: Sequence[str] = ("serve",)) -> SessionReplay:
    """Load ``saved_model_dir`` as TF Serving does and run each signature of ``inputs`` once.

    A fresh ``tf.Graph`` and TF1 ``Session``; ``saved_model.loader.load``
    restores the variables and runs the init op; each signature is fed and
    fetched by the tensor names of its ``SignatureDef``. Signatures the
    SavedModel lacks are reported in ``errors``.
    """
    import tensorflow as tf  # TensorFlow: only when a SavedModel is run

    replay = SessionReplay()
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        try:
            meta_graph = _load_quietly(tf, session, tags, saved_model_dir)
        except Exception as exc:  # any load failure is the answer, not a crash
            replay.load_error = f"{type(exc).__name__}: {_tf_message(exc)}"
            return replay
        for key, feed in inputs.items():
            if key not in meta_graph.signature_def:
                replay.errors[key] = "the SavedModel has no such signature"
                continue
            signature = meta_graph.signature_def[key]
            try:
                replay.outputs[key] = session.run(
                    {name: info.name for name, info in signature.outputs.items()},
                    {signature.inputs[name].name: value for name, value in feed.items()})
            except (KeyError, TypeError, ValueError, tf.errors.OpError) as exc:
                replay.errors[key] = f"{type(exc).__name__}: {_tf_message(exc)}"
    return replay


def _load_quietly(tf: ModuleType, session: tf_v1.Session, tags: Sequence[str], saved_model_dir: Union[str, Path]
                  ) -> meta_graph_pb2.MetaGraphDef:
    """TF Serving's loader call, without TensorFlow's "deprecated, use tf.saved_model.load" warning."""
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")
    try:
        return tf.compat.v1.saved_model.loader.load(session, list(tags), str(saved_model_dir))
    finally:
        logger.setLevel(level)


def _tf_message(exc: BaseException) -> str:
    """The first lines of a TF error (its Python stack trace of graph construction left out)."""
    text = getattr(exc, "message", None) or str(exc)
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(lines[:8])


def session_problem(what: str, error: str) -> str:
    """A Session failure as a problem line, with :data:`KERAS3_FIX` when it is the Keras 3 variable case."""
    hint = f" {KERAS3_FIX}." if "Could not find variable" in error else ""
    return f"{what} fails in a TF1 Session like TF Serving's: {error}.{hint}"


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
    """Replay golden inputs through a TF1 Session; compare with the variant's tolerance."""
    variant = get_variant(manifest.variant)
    tolerance = manifest.tolerance or variant.tolerance
    present = set(describe_signatures(version_dir))
    problems = [f"golden data for signature {sig!r}, which the saved model lacks"
                for sig in sorted(manifest.golden) if sig not in present]
    replay = run_in_session(version_dir, {sig: g.inputs for sig, g in sorted(manifest.golden.items())
                                          if sig in present})
    if replay.load_error:
        return problems + [session_problem("the SavedModel", replay.load_error)]
    for sig, golden in sorted(manifest.golden.items()):
        if sig in replay.errors:
            problems.append(f"golden {sig!r}: " + session_problem("the golden inputs", replay.errors[sig]))
        if sig not in replay.outputs:
            continue
        comparison = compare_outputs(golden.outputs, replay.outputs[sig], tolerance,
                                     top1_key=manifest.top1_outputs.get(sig),
                                     reduced_precision=variant.reduced_precision)
        report.golden[sig] = comparison.as_dict()
        problems += [f"golden {sig!r}: {p}" for p in comparison.problems]
    return problems


def check_warmup(signatures: Mapping[str, Signature], version_dir: Path, report: ValidationReport,
                 expected_batch_sizes: Optional[Sequence[int]] = None, required: bool = True) -> list[str]:
    """The warmup file parses and each request fits its signature (``signatures``: the manifest's, else the model's)."""
    path = warmup.warmup_path(version_dir)
    if not path.is_file():
        return [f"no warmup file at {path}"] if required else []
    try:
        records = warmup.read_warmup(version_dir)
    except Exception as exc:  # a corrupt TFRecord or proto: report, don't crash
        return [f"warmup file {path} does not parse as PredictionLog records: {exc}"]
    report.warmup_records = len(records)
    problems = [] if len(records) <= warmup.MAX_RECORDS else [
        f"warmup file has {len(records)} records; TF Serving accepts at most {warmup.MAX_RECORDS}"]
    sizes: set[int] = set()
    for i, record in enumerate(records):
        if record.WhichOneof("log_type") != "predict_log":
            problems.append(f"warmup record {i} is a {record.WhichOneof('log_type')}, expected predict_log")
            continue
        problems += _check_request(i, record.predict_log.request, signatures, sizes)
    report.warmup_batch_sizes = sorted(sizes)
    if expected_batch_sizes is not None and sorted(sizes) != sorted(expected_batch_sizes):
        problems.append(f"warmup covers batch sizes {sorted(sizes)}, manifest says {sorted(expected_batch_sizes)}")
    return problems


def _check_request(i: int, request: "predict_pb2.PredictRequest", signatures: Mapping[str, Signature],
                   sizes: set[int]) -> list[str]:
    name = request.model_spec.signature_name or DEFAULT_SIGNATURE
    signature = signatures.get(name)
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


def _warmup_batch_sizes(manifest: Manifest, problems: list[str]) -> Optional[list[int]]:
    """The batch sizes the manifest says its warmup covers: None when it says none, or says it as something
    other than a list of integers (a problem)."""
    sizes = manifest.warmup.get("batch_sizes")
    if sizes is None:
        return None
    numbers = [size for size in sizes if isinstance(size, int)] if isinstance(sizes, list) else []
    if not isinstance(sizes, list) or len(numbers) != len(sizes):
        problems.append(f"manifest warmup batch_sizes is {sizes!r}, not a list of batch sizes")
        return None
    return numbers


def validate(path: Union[str, Path], *, shapes: Optional[Mapping[str, Sequence[int]]] = None) -> ValidationReport:
    """Validate a version directory (or a model directory: its latest version), any SavedModel included.

    With a manifest: signatures, goldens (through a TF1 Session) and warmup
    against it. Without: every predict signature runs in a TF1 Session on
    synthesized inputs (``shapes``: ``{input name: dimensions after the
    batch}`` for unknown ones). Returns the report; raises
    :class:`ValidationError` listing every problem.
    """
    version_dir = resolve_version_dir(path)
    try:
        actual = describe_signatures(version_dir)
    except Exception as exc:  # an unreadable saved_model.pb or no "serve" meta graph
        raise ValidationError(version_dir, [f"not a SavedModel TF Serving can load: {exc}"]) from exc
    if not (version_dir / MANIFEST_FILE).is_file():
        return _validate_without_manifest(version_dir, actual, shapes or {})
    manifest = load_manifest(version_dir)
    report = ValidationReport(path=version_dir, variant=manifest.variant)
    report.signatures = sorted(actual)
    report.problems += check_signatures(manifest, actual)
    report.problems += check_golden(manifest, version_dir, report)
    report.problems += check_warmup(manifest.signatures, version_dir, report,
                                    _warmup_batch_sizes(manifest, report.problems))
    if report.problems:
        raise ValidationError(version_dir, report.problems)
    return report


def _validate_without_manifest(version_dir: Path, signatures: Mapping[str, Signature],
                               shapes: Mapping[str, Sequence[int]]) -> ValidationReport:
    report = ValidationReport(path=version_dir, signatures=sorted(signatures), has_manifest=False)
    if not signatures:
        report.problems.append("the SavedModel has no signatures: TF Serving has nothing to serve")
    inputs = {}
    for key, signature in sorted(signatures.items()):
        if signature.method_name != PREDICT_METHOD_NAME:
            report.skipped[key] = f"method {signature.method_name} takes serialized tf.Examples; not run"
            continue
        fixed = [n for n, t in signature.inputs.items() if t.shape and t.shape[0] is not None]
        if fixed:
            report.notes.append(f"signature {key!r} fixes the batch dimension of {', '.join(fixed)}: "
                                "TF Serving's batching needs -1")
        try:
            own = {n: d for n, d in shapes.items() if n in signature.inputs}
            inputs[key] = synthesize_inputs(signature, _batch(signature), shapes=own, flag="--shape")
        except ValueError as exc:
            report.problems.append(f"signature {key!r}: {exc}")
    replay = run_in_session(version_dir, inputs)
    if replay.load_error:
        report.problems.append(session_problem("the SavedModel", replay.load_error))
    for key, error in sorted(replay.errors.items()):
        report.problems.append(f"signature {key!r}: " + session_problem("predict", error))
    report.ran = {k: {o: list(np.shape(v)) for o, v in out.items()} for k, out in sorted(replay.outputs.items())}
    report.problems += check_warmup(signatures, version_dir, report, required=False)
    if report.problems:
        raise ValidationError(version_dir, report.problems)
    return report


def _batch(signature: Signature) -> int:
    """The batch size a synthesized request needs: the fixed one if an input fixes it."""
    fixed = {t.shape[0] for t in signature.inputs.values() if t.shape and t.shape[0] is not None}
    return fixed.pop() if len(fixed) == 1 else SYNTHETIC_BATCH
