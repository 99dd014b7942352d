"""Export a zoo model as a TF Serving version directory.

``export_model`` trains (or seeds) the model, saves it with fixed input
signatures (batch dimension ``None``), writes the warmup file and the
manifest, replays the golden inputs through the *saved* model, and only then
publishes the version with one atomic rename (``serving.model_repo.Staging``).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import logging
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

import numpy as np
from google.protobuf.message import Message
from tqdm.auto import tqdm

from exporter import warmup, zoo
from exporter.compare import compare_outputs
from exporter.manifest import Golden, Manifest, write_manifest
from exporter.signatures import describe_signatures
from exporter.variants import Variant, VariantUnavailable, get_variant, trt, xla
from serving.codec import DEFAULT_SIGNATURE
from serving.model_repo import WARMUP_DIR, WARMUP_REQUESTS_FILE, Staging, model_versions

__all__ = ["ExportError", "export_model", "ensure_model", "source_hash"]

log = logging.getLogger(__name__)

PathLike = Union[str, Path]
_ROOT = Path(__file__).resolve().parents[1]
_STEPS = ("build", "trace", "save", "warmup", "golden", "manifest", "publish")


class ExportError(RuntimeError):
    """The exported model does not behave like the model that was built."""


def source_hash() -> str:
    """sha256 of the code that builds every model: the exporter and the codec package it uses."""
    digest = hashlib.sha256()
    for path in sorted((_ROOT / "exporter").rglob("*.py")) + sorted((_ROOT / "serving" / "codec").rglob("*.py")):
        digest.update(path.relative_to(_ROOT).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _as_numpy(outputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in outputs.items()}


def _run_all(functions: Mapping[str, Any], inputs: Mapping[str, Mapping[str, np.ndarray]]) -> dict:
    import tensorflow as tf  # TensorFlow: only when exporting

    return {sig: _as_numpy(functions[sig](**{k: tf.constant(v) for k, v in inputs[sig].items()}))
            for sig in inputs}


def _check_available(variant: Variant, name: str) -> None:
    if variant.name != "trt-fp16":
        return
    reason = trt.unavailable_reason()
    if reason:
        raise VariantUnavailable(
            f"cannot export {name} as trt-fp16 here: {reason}. TF-TRT needs an NVIDIA GPU and TensorRT; "
            f"run it in the compose stack's GPU exporter image: {trt.GPU_COMMAND.format(model=name)}")


def _variables_module(functions: Mapping[str, Any]) -> Any:
    """A ``tf.Module`` that tracks exactly the ``tf.Variable`` objects the signatures read.

    Saving the Keras 3 model itself would checkpoint Keras' variable wrappers
    (and the optimizer's state) while the signatures read the underlying
    ``tf.Variable`` objects: ``tf.saved_model.load`` copes, but a TF1
    Session loader — TF Serving's — fails with "Could not find variable ..."
    (tensorflow/serving#2250). Tracking the captured variables themselves
    makes both loaders restore them, and stores each weight once.
    """
    import tensorflow as tf  # TensorFlow: only when exporting

    captured: dict[int, Any] = {}
    for function in functions.values():
        for variable in function.get_concrete_function().variables:
            captured.setdefault(id(variable), variable)
    module = tf.Module()
    module.serving_variables = list(captured.values())
    return module


def _save(variant: Variant, built: zoo.BuiltModel, functions: Mapping[str, Any], dest: Path,
          batch_sizes: Sequence[int]) -> None:
    import tensorflow as tf  # TensorFlow: only when exporting

    if variant.name == "xla":
        functions = xla.xla_signatures(built)
    if variant.name in ("fp32", "xla"):
        tf.saved_model.save(_variables_module(functions), str(dest), signatures=dict(functions))
    else:
        with tempfile.TemporaryDirectory(prefix="tfs-stack-fp32-") as fp32:
            tf.saved_model.save(_variables_module(functions), fp32, signatures=dict(functions))
            trt.convert(Path(fp32), dest, built.golden_inputs[DEFAULT_SIGNATURE], batch_sizes)


def _notes(variant: Variant, built: zoo.BuiltModel, allowed: Sequence[int],
           covered: Sequence[int]) -> tuple[str, ...]:
    notes = list(built.notes)
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


class _Steps:
    """A tqdm bar over the export steps; ``with steps("save"): ...`` advances it."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.bar = tqdm(total=len(_STEPS), desc=f"export {label}", unit="step", disable=not enabled)

    @contextlib.contextmanager
    def __call__(self, step: str) -> Iterator[None]:
        self.bar.set_postfix_str(step)
        yield
        self.bar.update()

    def close(self) -> None:
        self.bar.close()


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
    _check_available(spec, name)
    staging = Staging(Path(out) / spec.published_name(name), version)
    staging.check_version_free()
    batch_sizes = warmup.allowed_batch_sizes(batching_config)
    steps = _Steps(spec.published_name(name), progress)
    try:
        with steps("build"):
            built = zoo.build(name, progress=progress)
        with steps("trace"):
            functions = built.make_signatures(built.core)
            reference = _run_all(functions, built.golden_inputs)
        with staging:
            _write_version(staging.path, spec, built, functions, reference, batch_sizes, steps)
            with steps("publish"):
                path = staging.publish()
    finally:
        steps.close()
    log.info("published %s", path)
    return path


def _write_version(dest: Path, spec: Variant, built: zoo.BuiltModel, functions: Mapping[str, Any],
                   reference: Mapping[str, Mapping[str, np.ndarray]], batch_sizes: Sequence[int],
                   steps: _Steps) -> None:
    """Save the model, its warmup file and its manifest into ``dest``."""
    published = spec.published_name(built.name)
    with steps("save"):
        _save(spec, built, functions, dest, batch_sizes)
        signatures = describe_signatures(dest)
    with steps("warmup"):
        golden_inputs = {s: built.golden_inputs[s] for s in signatures}
        records = warmup.build_requests(published, golden_inputs, batch_sizes)
        warmup.write_warmup(dest, records)
        covered = sorted({_batch(r) for r in records})
    with steps("golden"):
        golden, agreement = _golden(spec, dest, golden_inputs, reference, built)
    with steps("manifest"):
        write_manifest(dest, Manifest(
            model=built.name, published_name=published, variant=spec.name,
            tensorflow_version=_tf_version(), source_hash=source_hash(),
            created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            signatures=signatures, golden=golden, accuracy=built.accuracy,
            metrics=dict(built.metrics), tolerance=dict(spec.tolerance),
            warmup={"file": f"{WARMUP_DIR}/{WARMUP_REQUESTS_FILE}", "records": len(records),
                    "batch_sizes": covered, "allowed_batch_sizes": list(batch_sizes)},
            agreement=agreement,
            top1_outputs={s: k for s, k in built.top1_outputs.items() if s in golden},
            notes=_notes(spec, built, batch_sizes, covered)))


def _tf_version() -> str:
    import tensorflow as tf  # TensorFlow: only when exporting

    return tf.__version__


def _batch(record: Message) -> int:
    tensor = next(iter(record.predict_log.request.inputs.values()))
    return int(tensor.tensor_shape.dim[0].size)


def _golden(spec: Variant, saved: Path, inputs: Mapping[str, Mapping[str, np.ndarray]],
            reference: Mapping[str, Mapping[str, np.ndarray]], built: zoo.BuiltModel):
    """Replay golden inputs through the saved model; check them against the FP32 reference."""
    import tensorflow as tf  # TensorFlow: only when exporting

    loaded = tf.saved_model.load(str(saved))
    actual = _run_all(loaded.signatures, inputs)
    golden, agreement = {}, {}
    for sig in inputs:
        comparison = compare_outputs(reference[sig], actual[sig], spec.tolerance,
                                     top1_key=built.top1_outputs.get(sig),
                                     reduced_precision=spec.reduced_precision)
        if comparison.problems:
            raise ExportError(f"{built.name} ({spec.name}) signature {sig!r} disagrees with FP32: "
                              + "; ".join(comparison.problems))
        agreement[sig] = {"against": "fp32", **comparison.as_dict()}
        expected = actual[sig] if spec.name == "fp32" else reference[sig]
        golden[sig] = Golden(sig, dict(inputs[sig]), expected, built.labels.get(sig))
    return golden, agreement


def ensure_model(name: str, *, variant: str = "fp32", out: PathLike = "models",
                 progress: bool = True, batching_config: Optional[PathLike] = None) -> Optional[Path]:
    """Export version 1 of ``name`` unless it already has a version; return the new dir or None."""
    base = Path(out) / get_variant(variant).published_name(name)
    if model_versions(base):
        return None
    return export_model(name, variant=variant, version=1, out=out, progress=progress,
                        batching_config=batching_config)
