"""The exporter's manifest: what a version directory holds and how it should answer.

``manifest.json`` sits beside ``saved_model.pb``; every array (golden inputs
and outputs, labels) lives in the sidecar ``manifest.npz`` so the JSON stays
small even for resnet50. Reading needs numpy only — load tests and clients
import this module without TensorFlow. Signatures are ``serving.codec``'s
``Signature``/``TensorSpec``, stored with their ``to_json`` records (TF dtype
names, -1 for an unknown dimension).

String tensors are stored in the ``.npz`` without pickle: as the
concatenated bytes (``uint8``) plus offsets, so any bytes (serialized
tf.Examples included) survive exactly.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Union

import numpy as np

from serving.codec import DEFAULT_SIGNATURE, JSON, Signature

__all__ = [
    "MANIFEST_FILE",
    "ARRAYS_FILE",
    "GOLDEN_SOURCES",
    "Golden",
    "Manifest",
    "load_manifest",
    "write_manifest",
]

MANIFEST_FILE = "manifest.json"
ARRAYS_FILE = "manifest.npz"
FORMAT_VERSION = 1
# Manifest.golden_source: held-out data of a zoo model, a user's samples, or synthesized from the signature.
GOLDEN_SOURCES = ("zoo", "user", "synthetic")


@dataclass(frozen=True)
class Golden:
    """Reference inputs and outputs of one signature (first axis = batch)."""

    signature: str
    inputs: Mapping[str, np.ndarray]
    outputs: Mapping[str, np.ndarray]
    labels: Optional[np.ndarray] = None   # ground truth per row, where the data has one

    @property
    def batch_size(self) -> int:
        return int(next(iter(self.inputs.values())).shape[0])


@dataclass(frozen=True)
class Manifest:
    """Everything :func:`load_manifest` reads back; see docs/architecture.md."""

    model: str                        # the model's name, e.g. "digits" or a user's "my_mlp"
    published_name: str               # model name served, e.g. "digits_xla"
    variant: str                      # "fp32" | "xla" | "trt-fp16"
    tensorflow_version: str
    source_hash: str                  # sha256 of the exporter code, and of the user's model if not the zoo's
    created: str                      # ISO 8601 UTC
    signatures: Mapping[str, Signature]
    golden: Mapping[str, Golden]
    accuracy: Optional[float] = None  # held-out accuracy where measurable
    metrics: Mapping[str, JSON] = field(default_factory=dict)
    tolerance: Mapping[str, float] = field(default_factory=dict)
    warmup: Mapping[str, JSON] = field(default_factory=dict)
    agreement: Mapping[str, JSON] = field(default_factory=dict)
    top1_outputs: Mapping[str, str] = field(default_factory=dict)  # per signature: the class-score output
    notes: tuple[str, ...] = ()
    # Where the golden inputs came from: "zoo" (held-out data), "user" (the user's samples) or
    # "synthetic" (made from the signature: outputs are checked, not meaningful). Manifests
    # without the field were written before any model but the zoo's could be exported.
    golden_source: str = "zoo"
    source: str = "zoo"               # what was exported: "zoo", "keras.Model", "SavedModel <path>", ...
    path: Optional[Path] = None

    @property
    def version(self) -> Optional[int]:
        """The version number: the name of the directory it was read from (None if not numeric)."""
        return int(self.path.name) if self.path is not None and self.path.name.isdigit() else None

    @property
    def labels(self) -> Optional[np.ndarray]:
        """Ground-truth labels of the default signature's golden rows, if the data has them."""
        golden = self.golden.get(DEFAULT_SIGNATURE)
        return None if golden is None else golden.labels

    def golden_inputs(self, signature: str = DEFAULT_SIGNATURE) -> dict[str, np.ndarray]:
        """The golden inputs of ``signature`` (a copy)."""
        return {k: v.copy() for k, v in self._golden(signature).inputs.items()}

    def golden_outputs(self, signature: str = DEFAULT_SIGNATURE) -> dict[str, np.ndarray]:
        """The expected outputs for :meth:`golden_inputs` (a copy)."""
        return {k: v.copy() for k, v in self._golden(signature).outputs.items()}

    def sample_inputs(self, signature: str = DEFAULT_SIGNATURE, batch_size: int = 1,
                      offset: int = 0) -> dict[str, np.ndarray]:
        """``batch_size`` rows of real inputs for ``signature``, cycling the golden rows.

        Rows start at ``offset`` (modulo the golden batch), so load tests can
        vary payloads: digits images, text strings, ranker features.
        """
        golden = self._golden(signature)
        rows = (np.arange(batch_size) + offset) % golden.batch_size
        return {k: v[rows] for k, v in golden.inputs.items()}

    def _golden(self, signature: str) -> Golden:
        try:
            return self.golden[signature]
        except KeyError:
            raise KeyError(f"manifest of {self.published_name} has no golden data for signature "
                           f"{signature!r}; it has {sorted(self.golden)}") from None


PathLike = Union[str, Path]


def _pack(arrays: dict[str, np.ndarray], key: str, value: np.ndarray) -> None:
    value = np.asarray(value)
    if value.dtype.kind in ("O", "S", "U"):
        items = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in value.reshape(-1)]
        lengths = np.array([len(b) for b in items], dtype=np.int64)
        arrays[f"{key}.bytes"] = np.frombuffer(b"".join(items), dtype=np.uint8)
        arrays[f"{key}.lengths"] = lengths
        arrays[f"{key}.shape"] = np.array(value.shape, dtype=np.int64)
    else:
        arrays[key] = value


def _unpack(npz: Mapping[str, np.ndarray], key: str) -> np.ndarray:
    if key in npz:
        return np.asarray(npz[key])
    data = npz[f"{key}.bytes"].tobytes()
    ends = np.cumsum(npz[f"{key}.lengths"])
    starts = ends - npz[f"{key}.lengths"]
    flat = np.empty(len(ends), dtype=object)
    flat[:] = [data[s:e] for s, e in zip(starts.tolist(), ends.tolist())]
    return flat.reshape(tuple(npz[f"{key}.shape"].tolist()))


def write_manifest(version_dir: PathLike, manifest: Manifest) -> Path:
    """Write ``manifest.json`` and ``manifest.npz`` into ``version_dir``; return the JSON path."""
    version_dir = Path(version_dir)
    arrays: dict[str, np.ndarray] = {}
    golden_json = {}
    for sig, golden in manifest.golden.items():
        entry: dict[str, JSON] = {"inputs": {}, "outputs": {}, "batch_size": golden.batch_size}
        for part in ("inputs", "outputs"):
            tensors: dict[str, JSON] = {}
            for key, value in getattr(golden, part).items():
                ref = f"{sig}/{part}/{key}"
                _pack(arrays, ref, value)
                tensors[key] = {"array": ref, "dtype": str(np.asarray(value).dtype), "shape": list(np.shape(value))}
            entry[part] = tensors
        if golden.labels is not None:
            _pack(arrays, f"{sig}/labels", golden.labels)
            entry["labels"] = f"{sig}/labels"
        golden_json[sig] = entry
    doc = {
        "format_version": FORMAT_VERSION,
        "model": manifest.model,
        "published_name": manifest.published_name,
        "variant": manifest.variant,
        "tensorflow_version": manifest.tensorflow_version,
        "source_hash": manifest.source_hash,
        "created": manifest.created,
        "accuracy": manifest.accuracy,
        "metrics": dict(manifest.metrics),
        "tolerance": dict(manifest.tolerance),
        "warmup": dict(manifest.warmup),
        "agreement": dict(manifest.agreement),
        "top1_outputs": dict(manifest.top1_outputs),
        "notes": list(manifest.notes),
        "golden_source": manifest.golden_source,
        "source": manifest.source,
        "signatures": {name: sig.to_json() for name, sig in manifest.signatures.items()},
        "golden": golden_json,
        "arrays_file": ARRAYS_FILE,
    }
    np.savez(version_dir / ARRAYS_FILE, **arrays)
    path = version_dir / MANIFEST_FILE
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return path


def load_manifest(version_dir: PathLike) -> Manifest:
    """Read the manifest of a version directory (numpy only, no TensorFlow).

    Raises FileNotFoundError if the directory has no ``manifest.json``.
    """
    version_dir = Path(version_dir)
    doc = json.loads((version_dir / MANIFEST_FILE).read_text())
    with np.load(version_dir / doc.get("arrays_file", ARRAYS_FILE), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    golden = {}
    for sig, entry in doc["golden"].items():
        golden[sig] = Golden(
            signature=sig,
            inputs={k: _unpack(arrays, v["array"]) for k, v in entry["inputs"].items()},
            outputs={k: _unpack(arrays, v["array"]) for k, v in entry["outputs"].items()},
            labels=_unpack(arrays, entry["labels"]) if "labels" in entry else None)
    return Manifest(
        model=doc["model"], published_name=doc["published_name"],
        variant=doc["variant"], tensorflow_version=doc["tensorflow_version"],
        source_hash=doc["source_hash"], created=doc["created"],
        signatures={n: Signature.from_json(n, s) for n, s in doc["signatures"].items()},
        golden=golden, accuracy=doc.get("accuracy"), metrics=doc.get("metrics", {}),
        tolerance=doc.get("tolerance", {}), warmup=doc.get("warmup", {}),
        agreement=doc.get("agreement", {}), top1_outputs=doc.get("top1_outputs", {}),
        notes=tuple(doc.get("notes", ())), golden_source=doc.get("golden_source", "zoo"),
        source=doc.get("source", "zoo"), path=version_dir)
