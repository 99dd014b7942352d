"""Export a model as TF Serving version directories: a user's model or a zoo model, one pipeline.

- :func:`export` takes a user's model (a Keras model, a ``tf.Module`` with
  ``tf.function``\\ s, a SavedModel directory or a ``.keras`` file;
  ``exporter.sources`` fixes its signatures) and returns ``{variant: version dir}``.
- :func:`export_model` builds a zoo model (``exporter.zoo``) and returns its version dir.

Both check first that every variant can be built here and that the
requested version is free, then, per variant (fp32 first): save the
signatures through a ``tf.Module`` that tracks exactly the variables and
resources they read (so TF Serving's TF1 Session loader restores them, see
:func:`_serving_module`), replay the golden inputs through a TF1 Session the
way TF Serving runs them (``exporter.validate.run_in_session``) and compare
with the model's own outputs, write the warmup file and the manifest, and
only then publish the version with one atomic rename
(``serving.model_repo.Staging``). A refused export publishes nothing for
that variant: no numeric directory, no staging directory left behind.
"""
from __future__ import annotations

import datetime as _dt
import errno
import hashlib
import logging
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, Union

import numpy as np
from google.protobuf.message import Message

from exporter import samples, sources, warmup, zoo
from exporter.compare import compare_outputs
from exporter.exportable import Exportable, ExportError
from exporter.manifest import Golden, Manifest, write_manifest
from exporter.progress import Steps
from exporter.signatures import describe_signatures
from exporter.validate import run_in_session, session_problem
from exporter.variants import Variant, VariantUnavailable, get_variant, trt, xla
from serving.checkout import REPO_ROOT
from serving.codec import DEFAULT_SIGNATURE, JSON, TensorSpec
from serving.model_repo import WARMUP_DIR, WARMUP_REQUESTS_FILE, Staging, model_versions

if TYPE_CHECKING:  # annotations only: importing this module loads no TensorFlow
    import tensorflow as tf
    from tensorflow.types.experimental import GenericFunction

__all__ = [
    "DEFAULT_MODEL_REPO",
    "ExportError",
    "VariantFailed",
    "export",
    "export_model",
    "ensure_model",
    "source_hash",
]

log = logging.getLogger(__name__)

PathLike = Union[str, Path]
Tolerance = Union[Mapping[str, float], Mapping[str, Mapping[str, float]]]
DEFAULT_MODEL_REPO = REPO_ROOT / "models"
_VARIANT_STEPS = ("save", "session", "warmup", "manifest", "publish")
_TOLERANCE_KEYS = ("atol", "rtol", "min_top1")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_USER_GPU_COMMAND = "docker compose run --rm exporter export --from {source} --name {name} --variant trt-fp16"


class VariantFailed(ExportError):
    """A variant failed after earlier ones were published; ``published`` maps those to their directories."""

    def __init__(self, variant: str, published: Mapping[str, Path], message: str) -> None:
        self.variant = variant
        self.published = dict(published)
        done = ", ".join(f"{v} at {p}" for v, p in self.published.items())
        super().__init__(f"{message}\n(published before it failed: {done})")


def source_hash(model_digest: Optional[str] = None) -> str:
    """sha256 of the code that exports every model (the exporter and the codec package it uses).

    With ``model_digest`` (a user's model: the files it was read from, or
    its graphs and weights), the hash covers both the code and that model.
    """
    digest = hashlib.sha256()
    sources = sorted((REPO_ROOT / "exporter").rglob("*.py")) + sorted((REPO_ROOT / "serving" / "codec").rglob("*.py"))
    for path in sources:
        digest.update(path.relative_to(REPO_ROOT).as_posix().encode())
        digest.update(path.read_bytes())
    if model_digest is None:
        return digest.hexdigest()
    return hashlib.sha256(f"{digest.hexdigest()}:{model_digest}".encode()).hexdigest()


def export(model: Any, *, name: str, out: PathLike = DEFAULT_MODEL_REPO,
           sample_inputs: Optional[samples.Samples] = None,
           signatures: Optional[sources.SignatureChoice] = None,
           inputs: Sequence[Union[str, TensorSpec]] = (), variants: Sequence[str] = ("fp32",),
           version: Optional[int] = None, tolerance: Optional[Tolerance] = None,
           batching_config: Optional[PathLike] = None, progress: bool = True) -> dict[str, Path]:
    """Export a user's model as version ``version`` of ``name`` in the model repository ``out``.

    ``model``: a Keras model, a ``tf.Module`` with ``tf.function``\\ s (with an
    ``input_signature``), a SavedModel directory or a ``.keras`` file (a path).
    ``signatures``: ``{key: tf.function}`` to serve instead, or the keys of
    the model's own to keep. ``inputs``: ``"NAME:DTYPE:d1,d2"`` strings (or
    ``serving.codec.TensorSpec(name, dtype, (None, d1, d2))``) setting an
    input's dtype and dimensions after the batch, e.g. an unknown one. ``sample_inputs``: an ``.npz`` or REST JSON file,
    ``{input: array}`` or ``{signature: {input: array}}``, or a request
    capture (a capture file or directory, or ``samples.CaptureSamples`` with a
    time window: the warmup's batches are its requests' rows concatenated);
    they become the goldens and the warmup rows, else rows are synthesized and the manifest
    says ``golden_source: "synthetic"``. ``variants`` are exported in order,
    fp32 first; published names are ``name``, ``name_xla``, ``name_trt_fp16``.
    ``tolerance``: ``{"atol", "rtol", "min_top1"}`` for every variant, or
    ``{variant: {...}}`` (not both: ValueError); unset keys keep the variant's defaults.
    ``version=None`` takes the next integer. Warmup covers the allowed batch
    sizes of ``batching_config`` (default ``serving/batching.config``).

    Returns ``{variant: published version directory}``. Raises
    :class:`~exporter.exportable.ExportError` (nothing published) when the
    model cannot be served as it is, :class:`VariantFailed` when a variant
    fails after earlier ones were published (e.g. XLA cannot compile an op;
    fp32 stays published), :class:`~exporter.variants.VariantUnavailable`
    before any work, :class:`~serving.model_repo.VersionExists`, ValueError
    for a bad argument.
    """
    specs = _ordered(variants)
    tolerances = _tolerances(specs, tolerance)
    described = str(model) if isinstance(model, (str, Path)) else "module:factory"
    _preflight(name, specs, out, version, _USER_GPU_COMMAND.format(source=described, name=name))
    batch_sizes = warmup.allowed_batch_sizes(batching_config)
    steps = Steps(name, progress, 2 + len(_VARIANT_STEPS) * len(specs))
    try:
        with steps("load"):
            user = sources.prepare(model, signatures=signatures, inputs=inputs)
            rows = samples.sample_rows(user.signatures, sample_inputs, warmup_rows=max(batch_sizes), name=name)
            if user.saved_model_dir is not None:
                _check_source(user.saved_model_dir, rows.golden)
        exportable = user.exportable(name, rows.golden, rows.golden_source, rows.notes, warmup_inputs=rows.warmup,
                                     warmup_source=rows.warmup_source)
        return _publish_variants(exportable, specs, out=out,
                                 version=version, batch_sizes=batch_sizes, tolerances=tolerances, steps=steps)
    finally:
        steps.close()


def export_model(name: str, *, variant: str = "fp32", version: Optional[int] = None,
                 out: PathLike = "models", progress: bool = True,
                 batching_config: Optional[PathLike] = None) -> Path:
    """Export zoo model ``name`` and return the published ``out/<published name>/<version>``.

    ``version=None`` takes the next integer after the highest existing
    version. Published names: fp32 → ``name``, xla → ``name_xla``,
    trt-fp16 → ``name_trt_fp16``. Warmup covers ``allowed_batch_sizes`` of
    ``batching_config`` (default ``serving/batching.config``, else
    1,2,4,8,16,32). Nothing numeric appears under ``out`` until the version
    is complete. ``progress=False`` prints nothing. Raises ValueError
    (unknown model or variant), :class:`~exporter.variants.VariantUnavailable`
    (before any work), :class:`~serving.model_repo.VersionExists`, or
    :class:`ExportError` when the saved model disagrees with the built one.
    """
    spec = get_variant(variant)
    if name not in zoo.MODELS:
        raise ValueError(f"unknown model {name!r}; the zoo has: {', '.join(zoo.MODELS)}")
    _preflight(name, [spec], out, version, trt.GPU_COMMAND.format(model=name))
    batch_sizes = warmup.allowed_batch_sizes(batching_config)
    steps = Steps(spec.published_name(name), progress, 2 + len(_VARIANT_STEPS))
    try:
        with steps("build"):
            built = zoo.build(name, progress=progress)
        paths = _publish_variants(Exportable.from_built(built), [spec], out=out, version=version,
                                  batch_sizes=batch_sizes, tolerances={spec.name: dict(spec.tolerance)},
                                  steps=steps)
    finally:
        steps.close()
    return paths[spec.name]


def ensure_model(name: str, *, variant: str = "fp32", out: PathLike = "models",
                 progress: bool = True, batching_config: Optional[PathLike] = None) -> Optional[Path]:
    """Export version 1 of zoo model ``name`` unless it already has a version; return the new dir or None."""
    base = Path(out) / get_variant(variant).published_name(name)
    if model_versions(base):
        return None
    return export_model(name, variant=variant, version=1, out=out, progress=progress,
                        batching_config=batching_config)


def _ordered(variants: Sequence[str]) -> list[Variant]:
    """The variants, each once, fp32 first: a variant that fails leaves the fp32 version published."""
    if isinstance(variants, str):
        variants = [variants]
    specs = [get_variant(v) for v in dict.fromkeys(variants)]
    if not specs:
        raise ValueError("no variant to export: give at least one of fp32, xla, trt-fp16")
    return sorted(specs, key=lambda s: s.name != "fp32")


def _tolerances(specs: Sequence[Variant], tolerance: Optional[Tolerance]) -> dict[str, dict[str, float]]:
    """Each variant's tolerance: its defaults, updated by ``tolerance`` (flat, or by variant name)."""
    entries: Mapping[str, Union[float, Mapping[str, float]]] = tolerance or {}
    by_variant = {name: limits for name, limits in entries.items() if isinstance(limits, Mapping)}
    flat = {key: limit for key, limit in entries.items() if not isinstance(limit, Mapping)}
    if by_variant and flat:
        raise ValueError(f"tolerance is either flat ({', '.join(_TOLERANCE_KEYS)}) or by variant name, "
                         f"not both: got {', '.join(entries)}")
    result = {}
    for spec in specs:
        given = by_variant.get(spec.name, {}) if by_variant else flat
        unknown = sorted(set(given) - set(_TOLERANCE_KEYS))
        if unknown:
            raise ValueError(f"unknown tolerance {', '.join(unknown)}; use {', '.join(_TOLERANCE_KEYS)}")
        result[spec.name] = {**spec.tolerance, **{k: float(v) for k, v in given.items()}}
    return result


def _preflight(name: str, specs: Sequence[Variant], out: PathLike, version: Optional[int], gpu_command: str) -> None:
    """Checks that need no model: a servable name, every variant buildable here, every version free."""
    if not _NAME.match(name):
        raise ValueError(f"bad model name {name!r}: use letters, digits, '_', '-' and '.', starting with a "
                         "letter or digit (it is a directory of the model repository)")
    for spec in specs:
        _check_available(spec, spec.published_name(name), gpu_command)
    for spec in specs:
        Staging(Path(out) / spec.published_name(name), version).check_version_free()


def _check_available(variant: Variant, name: str, gpu_command: str) -> None:
    if variant.name != "trt-fp16":
        return
    reason = trt.unavailable_reason()
    if reason:
        raise VariantUnavailable(
            f"cannot export {name} as trt-fp16 here: {reason}. TF-TRT needs an NVIDIA GPU and TensorRT; "
            f"run it in the compose stack's GPU exporter image: {gpu_command}")


def _check_source(saved_model_dir: Path, golden: Mapping[str, Mapping[str, np.ndarray]]) -> None:
    """Refuse a SavedModel that TF Serving would load but not run (the Keras 3 tf.saved_model.save case)."""
    replay = run_in_session(saved_model_dir, golden)
    failure = replay.load_error or next((f"signature {k!r}: {e}" for k, e in sorted(replay.errors.items())), None)
    if failure:
        raise ExportError(session_problem(f"the SavedModel {saved_model_dir}", failure))


def _publish_variants(model: Exportable, specs: Sequence[Variant], *, out: PathLike, version: Optional[int],
                      batch_sizes: Sequence[int], tolerances: Mapping[str, Mapping[str, float]],
                      steps: Steps) -> dict[str, Path]:
    """Trace once, compute the reference outputs, then publish each variant in order."""
    with steps("trace"):
        functions = model.make_signatures(False)
        reference = _run_all(model, functions)
    published: dict[str, Path] = {}
    for spec in specs:
        try:
            published[spec.name] = _publish(model, spec, functions, reference, out=out, version=version,
                                            batch_sizes=batch_sizes, tolerance=tolerances[spec.name], steps=steps)
        except ExportError as exc:
            if published:
                raise VariantFailed(spec.name, published, str(exc)) from exc
            raise
        log.info("published %s", published[spec.name])
    return published


def _run_all(model: Exportable, functions: Mapping[str, GenericFunction]) -> dict[str, dict[str, np.ndarray]]:
    """The model's own outputs for the golden inputs (the reference every export must reproduce)."""
    import tensorflow as tf  # TensorFlow: only when exporting

    outputs = {}
    for sig, inputs in model.golden_inputs.items():
        try:
            result = functions[sig](**{k: tf.constant(v) for k, v in inputs.items()})
        except (TypeError, ValueError, tf.errors.OpError) as exc:
            hint = ("; its golden inputs are synthetic: give real rows with --samples (sample_inputs=), or "
                    "leave the signature out with --signature (signatures=)") if model.golden_source == "synthetic" else ""
            raise ExportError(f"{model.name}: signature {sig!r} fails on its golden inputs: {type(exc).__name__}: "
                              f"{str(exc).strip().splitlines()[0]}{hint}") from exc
        outputs[sig] = {k: v.numpy() for k, v in result.items()}
    return outputs


def _publish(model: Exportable, spec: Variant, functions: Mapping[str, GenericFunction],
             reference: Mapping[str, Mapping[str, np.ndarray]], *, out: PathLike, version: Optional[int],
             batch_sizes: Sequence[int], tolerance: Mapping[str, float], steps: Steps) -> Path:
    base = Path(out) / spec.published_name(model.name)
    created = not base.exists()
    staging = Staging(base, version)
    try:
        with staging:
            _write_version(staging.path, spec, model, functions, reference, batch_sizes, tolerance, steps)
            with steps(f"{spec.name}: publish"):
                return staging.publish()
    except OSError as exc:   # a full or read-only disk: the path and errno, not a traceback after training
        raise ExportError(disk_error(exc, base)) from exc
    except Exception as exc:
        if _is_disk_error(exc):   # TensorFlow's own writers raise its OpError, naming errno only in text
            raise ExportError(disk_error(exc, base)) from exc
        raise
    finally:
        if created and staging.published is None and base.is_dir() and not any(base.iterdir()):
            shutil.rmtree(base, ignore_errors=True)


_DISK_ERRNOS = {errno.ENOSPC: "No space left on device", errno.EROFS: "Read-only file system",
                errno.EDQUOT: "Disk quota exceeded", errno.EACCES: "Permission denied", errno.EIO: "I/O error"}


def _is_disk_error(exc: BaseException) -> bool:
    text = str(exc)
    return type(exc).__module__.startswith("tensorflow") and any(m in text for m in _DISK_ERRNOS.values())


def disk_error(exc: BaseException, base: Path) -> str:
    """What an export that could not write says: the path, the errno and what to do."""
    if isinstance(exc, OSError) and exc.errno is not None:
        where = exc.filename or base
        cause = f"{exc.strerror} (errno {exc.errno}, {errno.errorcode.get(exc.errno, '?')})"
    else:
        where = base
        found = next((n for n, m in _DISK_ERRNOS.items() if m in str(exc)), None)
        cause = (f"{_DISK_ERRNOS[found]} (errno {found}, {errno.errorcode[found]})" if found is not None
                 else str(exc).strip().splitlines()[0])
    return (f"cannot write the export under {where}: {cause}; nothing was published (free space or make "
            f"{base.parent} writable, then export again)")


def _write_version(dest: Path, spec: Variant, model: Exportable, functions: Mapping[str, GenericFunction],
                   reference: Mapping[str, Mapping[str, np.ndarray]], batch_sizes: Sequence[int],
                   tolerance: Mapping[str, float], steps: Steps) -> None:
    """Save the model, check it in a TF1 Session, write its warmup file and its manifest into ``dest``."""
    published = spec.published_name(model.name)
    with steps(f"{spec.name}: save"):
        _save(spec, model, functions, dest, batch_sizes)
        signatures = describe_signatures(dest)
    golden_inputs = {s: model.golden_inputs[s] for s in signatures}
    with steps(f"{spec.name}: session"):
        golden, agreement = _golden(spec, published, dest, golden_inputs, reference, model, tolerance)
    with steps(f"{spec.name}: warmup"):
        records = warmup.build_requests(published, {s: model.warmup_inputs.get(s, rows)
                                                    for s, rows in golden_inputs.items()}, batch_sizes)
        warmup.write_warmup(dest, records)
        covered = sorted({_batch(r) for r in records})
    with steps(f"{spec.name}: manifest"):
        write_manifest(dest, Manifest(
            model=model.name, published_name=published, variant=spec.name,
            tensorflow_version=_tf_version(), source_hash=source_hash(model.model_digest),
            created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            signatures=signatures, golden=golden, accuracy=model.accuracy,
            metrics=dict(model.metrics), tolerance=dict(tolerance),
            warmup={"file": f"{WARMUP_DIR}/{WARMUP_REQUESTS_FILE}", "records": len(records),
                    "batch_sizes": list(covered), "allowed_batch_sizes": list(batch_sizes),
                    **({"source": model.warmup_source} if model.warmup_source else {})},
            agreement=agreement,
            top1_outputs={s: k for s, k in model.top1_outputs.items() if s in golden},
            notes=_notes(spec, model, batch_sizes, covered),
            golden_source=model.golden_source, source=model.source))


def _save(spec: Variant, model: Exportable, functions: Mapping[str, GenericFunction], dest: Path,
          batch_sizes: Sequence[int]) -> None:
    import tensorflow as tf  # TensorFlow: only when exporting

    if spec.name == "xla":
        functions = model.make_signatures(True)
    try:
        if spec.name in ("fp32", "xla"):
            tf.saved_model.save(_serving_module(functions, model.root), str(dest), signatures=dict(functions))
            return
        with tempfile.TemporaryDirectory(prefix="tfs-stack-fp32-") as fp32:
            tf.saved_model.save(_serving_module(functions, model.root), fp32, signatures=dict(functions))
            inputs = model.golden_inputs.get(DEFAULT_SIGNATURE) or next(iter(model.golden_inputs.values()))
            trt.convert(Path(fp32), dest, inputs, batch_sizes)
    except AssertionError as exc:  # tf.saved_model.save's words for a captured, untracked resource
        raise ExportError(f"{model.name}: the signatures use a resource (a lookup table?) that the model does "
                          f"not track; assign it to an attribute of the model or tf.Module. TensorFlow says: "
                          f"{str(exc).strip().splitlines()[0]}") from exc


def _serving_module(functions: Mapping[str, GenericFunction], root: Any) -> tf.Module:
    """A ``tf.Module`` that tracks exactly the variables (and resources) the signatures read.

    Saving the Keras 3 model itself would checkpoint Keras' variable wrappers
    (and the optimizer's state) while the signatures read the underlying
    ``tf.Variable`` objects: ``tf.saved_model.load`` copes, but a TF1
    Session loader — TF Serving's — fails with "Could not find variable ..."
    (tensorflow/serving#2250). Tracking the captured variables themselves
    makes both loaders restore them, and stores each weight once. Lookup
    tables and other resources the signatures capture are found among the
    objects ``root`` tracks and tracked too (with their assets).
    """
    import tensorflow as tf  # TensorFlow: only when exporting

    captured: dict[int, tf.Variable] = {}
    handles: set[int] = set()
    for function in functions.values():
        concrete = function.get_concrete_function()
        for variable in concrete.variables:
            captured.setdefault(id(variable), variable)
        handles.update(id(external) for external, _ in concrete.graph.captures)
    module = tf.Module()
    module.serving_variables = list(captured.values())
    if root is not None:
        resources = [obj for obj in tf.train.TrackableView(root).descendants()
                     if isinstance(obj, tf.saved_model.experimental.TrackableResource)
                     and id(obj.resource_handle) in handles]
        if resources:
            module.serving_resources = resources
    return module


def _golden(spec: Variant, published: str, saved: Path, inputs: Mapping[str, Mapping[str, np.ndarray]],
            reference: Mapping[str, Mapping[str, np.ndarray]], model: Exportable,
            tolerance: Mapping[str, float]) -> tuple[dict[str, Golden], dict[str, JSON]]:
    """Replay golden inputs through a TF1 Session like TF Serving's; check them against the model's outputs."""
    replay = run_in_session(saved, inputs)
    where = f"{published} ({spec.name})"
    if replay.load_error:
        raise ExportError(f"{where}: " + session_problem("the export", replay.load_error))
    golden: dict[str, Golden] = {}
    agreement: dict[str, JSON] = {}
    for sig in inputs:
        if sig in replay.errors:
            error = replay.errors[sig]
            compile_error = xla.compile_error(error) if spec.name == "xla" else None
            raise ExportError(f"{where} signature {sig!r}: "
                              + (compile_error or session_problem("the golden inputs", error)))
        comparison = compare_outputs(reference[sig], replay.outputs[sig], tolerance,
                                     top1_key=model.top1_outputs.get(sig),
                                     reduced_precision=spec.reduced_precision)
        if comparison.problems:
            raise ExportError(f"{where} signature {sig!r} disagrees with the model's own outputs "
                              f"({'FP32' if spec.name != 'fp32' else 'before saving'}): "
                              + "; ".join(comparison.problems))
        agreement[sig] = {"against": "fp32", **comparison.as_dict()}
        expected = replay.outputs[sig] if spec.name == "fp32" else reference[sig]
        golden[sig] = Golden(sig, dict(inputs[sig]), expected, model.labels.get(sig))
    return golden, agreement


def _notes(variant: Variant, model: Exportable, allowed: Sequence[int],
           covered: Sequence[int]) -> tuple[str, ...]:
    notes = list(model.notes)
    if variant.name == "xla":
        notes.append(xla.SERVING_NOTE)
    if variant.reduced_precision:
        notes.append("golden outputs are the FP32 model's; this variant is checked against them with "
                     "the loose tolerance and top-1 agreement recorded here.")
    notes.append(f"warmup covers batch sizes {list(covered)} for every signature.")
    left_out = sorted(set(allowed) - set(covered))
    if left_out:
        notes.append(f"warmup leaves out allowed batch sizes {left_out} to stay under "
                     f"{warmup.MAX_WARMUP_BYTES >> 20} MiB / {warmup.MAX_RECORDS} records; the first "
                     "request of those sizes pays for its kernels.")
    return tuple(notes)


def _tf_version() -> str:
    import tensorflow as tf  # TensorFlow: only when exporting

    return tf.__version__


def _batch(record: Message) -> int:
    tensor = next(iter(record.predict_log.request.inputs.values()))
    return int(tensor.tensor_shape.dim[0].size)
