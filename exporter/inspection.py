"""``python -m exporter inspect``: what a SavedModel serves, its warmup, and its manifest.

Like ``saved_model_cli show --all`` for the signatures (every meta graph's
tag-set, each SignatureDef's inputs and outputs with dtype, shape and tensor
name, and its method name), plus a summary of the warmup file and of the
exporter's manifest when the version directory has them. Works on any
SavedModel directory, or a model directory (its latest version).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Union

from exporter import warmup
from exporter.manifest import MANIFEST_FILE, load_manifest
from exporter.validate import resolve_version_dir
from serving.codec import DEFAULT_SIGNATURE, JSON, Signature, TensorSpec

__all__ = ["inspect_saved_model", "format_report"]

_INIT_OP_KEY = "__saved_model_init_op"


def inspect_saved_model(path: Union[str, Path]) -> dict[str, JSON]:
    """A JSON-able description: ``path``, ``meta_graphs`` (tags, signatures), ``warmup``, ``manifest``.

    ``warmup`` and ``manifest`` are None when the directory has none.
    FileNotFoundError when ``path`` holds no SavedModel.
    """
    version_dir = resolve_version_dir(path)
    return {"path": str(version_dir), "meta_graphs": _meta_graphs(version_dir),
            "warmup": _warmup(version_dir), "manifest": _manifest(version_dir)}


def _meta_graphs(version_dir: Path) -> list[JSON]:
    from tensorflow.core.protobuf import saved_model_pb2  # TensorFlow: only when a SavedModel is read

    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((version_dir / "saved_model.pb").read_bytes())
    return [{"tags": sorted(meta_graph.meta_info_def.tags),
             "signatures": {key: Signature.from_signature_def(key, sig).to_json()
                            for key, sig in sorted(meta_graph.signature_def.items()) if key != _INIT_OP_KEY}}
            for meta_graph in saved_model.meta_graphs]


def _warmup(version_dir: Path) -> Optional[dict[str, Any]]:   # JSON-able (of ints: JSON's list is invariant)
    path = warmup.warmup_path(version_dir)
    if not path.is_file():
        return None
    try:
        records = warmup.read_warmup(version_dir)
    except Exception as exc:  # a corrupt file is reported, not raised
        return {"file": str(path.relative_to(version_dir)), "error": str(exc)}
    sizes: set[int] = set()
    by_signature: dict[str, int] = {}
    for record in records:
        request = record.predict_log.request
        name = request.model_spec.signature_name or DEFAULT_SIGNATURE
        by_signature[name] = by_signature.get(name, 0) + 1
        for tensor in request.inputs.values():
            if tensor.tensor_shape.dim:
                sizes.add(int(tensor.tensor_shape.dim[0].size))
            break
    return {"file": str(path.relative_to(version_dir)), "records": len(records),
            "batch_sizes": sorted(sizes), "signatures": dict(sorted(by_signature.items()))}


def _manifest(version_dir: Path) -> Optional[dict[str, JSON]]:
    if not (version_dir / MANIFEST_FILE).is_file():
        return None
    manifest = load_manifest(version_dir)
    return {"model": manifest.model, "published_name": manifest.published_name, "variant": manifest.variant,
            "version": manifest.version, "created": manifest.created,
            "tensorflow_version": manifest.tensorflow_version, "source": manifest.source,
            "source_hash": manifest.source_hash, "golden_source": manifest.golden_source,
            "golden_rows": {sig: g.batch_size for sig, g in sorted(manifest.golden.items())},
            "tolerance": dict(manifest.tolerance), "accuracy": manifest.accuracy,
            "metrics": dict(manifest.metrics), "notes": list(manifest.notes)}


def format_report(info: Mapping[str, Any]) -> str:   # inspect_saved_model's document, read back
    """The description as text: ``saved_model_cli show --all``'s layout, then warmup and manifest."""
    lines = [f"SavedModel: {info['path']}", ""]
    for meta_graph in info["meta_graphs"]:
        tags = ", ".join(repr(t) for t in meta_graph["tags"])
        lines.append(f"MetaGraphDef with tag-set: {tags} contains the following SignatureDefs:")
        if not meta_graph["signatures"]:
            lines.append("  (none: TF Serving has nothing to serve)")
        for key, doc in meta_graph["signatures"].items():
            signature = Signature.from_json(key, doc)
            lines += ["", f"signature_def['{key}']:"]
            for part, tensors in (("input", signature.inputs), ("output", signature.outputs)):
                lines.append(f"  The given SavedModel SignatureDef contains the following {part}(s):")
                lines += [line for name, spec in tensors.items() for line in _tensor_lines(part, name, spec)]
            lines.append(f"  Method name is: {signature.method_name}")
        lines.append("")
    lines += _warmup_lines(info["warmup"]) + _manifest_lines(info["manifest"])
    return "\n".join(lines).rstrip() + "\n"


def _tensor_lines(part: str, name: str, spec: TensorSpec) -> list[str]:
    dims = spec.dims
    shape = "unknown_rank" if dims is None else "(" + ", ".join(map(str, dims)) + ")"  # saved_model_cli's form
    return [f"    {part}s['{name}'] tensor_info:", f"        dtype: {spec.dtype_name}",
            f"        shape: {shape}", f"        name: {spec.tensor_name}"]


def _warmup_lines(summary: Optional[Mapping[str, Any]]) -> list[str]:
    if summary is None:
        return ["Warmup: none (no assets.extra/tf_serving_warmup_requests; the first requests pay for the kernels)"]
    if "error" in summary:
        return [f"Warmup: {summary['file']} does not parse: {summary['error']}"]
    per_signature = ", ".join(f"{k} ({n})" for k, n in summary["signatures"].items())
    return [f"Warmup: {summary['file']}: {summary['records']} records; batch sizes "
            f"{', '.join(map(str, summary['batch_sizes']))}; signatures {per_signature}"]


def _manifest_lines(manifest: Optional[Mapping[str, Any]]) -> list[str]:
    if manifest is None:
        return ["Manifest: none (not written by the exporter; `python -m exporter validate` runs synthetic inputs)"]
    rows = ", ".join(f"{k} {n} rows" for k, n in manifest["golden_rows"].items())
    tolerance = " ".join(f"{k}={v:g}" for k, v in manifest["tolerance"].items())
    lines = [f"Manifest: {manifest['model']} (served as {manifest['published_name']}), variant {manifest['variant']}, "
             f"version {manifest['version']}",
             f"  created {manifest['created']} with TensorFlow {manifest['tensorflow_version']}; "
             f"source: {manifest['source']}; source_hash {manifest['source_hash'][:16]}",
             f"  goldens: {manifest['golden_source']}; {rows}",
             f"  tolerance: {tolerance}"]
    if manifest["accuracy"] is not None:
        lines.append(f"  accuracy: {manifest['accuracy']:.4f}")
    lines += [f"  note: {note}" for note in manifest["notes"]]
    return lines
