"""What a canary analysis replays: batches of inputs from one source.

``--inputs`` of ``python -m serving.rollout analyze|auto`` is one of:

- ``manifest`` (default): the stable version's golden rows (its exporter manifest), ``--batch-size`` rows a call;
- ``warmup``: the stable version's warmup records (``assets.extra/tf_serving_warmup_requests``), each as it is;
- a request capture (``serving.capture``: a capture file or a directory of them, with ``--since`` / ``--until``):
  the captured Predict requests of the model, each replayed as it was sent (its own rows) on both sides, in
  time order. With the stable version's manifest, each must fit its signature (names, dtype, shape), else
  ``CaptureSourceError`` (exit 2) names the input and the rule;
- a file of the user's: ``.npz`` of arrays by input name, a REST ``{"inputs": ...}`` / ``{"instances": ...}``
  body as ``.json``, or any other file of TFRecord ``PredictionLog`` records.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional

import numpy as np
from google.protobuf.message import DecodeError

from exporter.capture_source import CaptureSourceError, Window, is_capture_source, read_source, signature_problems
from exporter.manifest import Manifest, load_manifest  # numpy only: the manifest reader imports no TensorFlow
from serving import codec, status
from serving.model_repo import warmup_path
from serving.wire import serving_apis_pb2 as apis

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

__all__ = ["stable_manifest", "load_inputs", "captured_inputs", "CaptureSourceError", "Window"]

def _batches(arrays: Mapping[str, np.ndarray], batch_size: int) -> list[dict[str, np.ndarray]]:
    rows = int(next(iter(arrays.values())).shape[0])
    return [{k: v[i:i + batch_size] for k, v in arrays.items()} for i in range(0, rows, batch_size)]


def _tfrecords(data: bytes) -> Iterable[bytes]:
    """The records of a TFRecord file (length, its CRC, data, its CRC; the CRCs are not checked here)."""
    offset = 0
    while offset < len(data):
        if offset + 12 > len(data):
            raise status.InvalidArgument("truncated TFRecord header")
        (length,) = struct.unpack_from("<Q", data, offset)
        start = offset + 12
        if start + length + 4 > len(data):
            raise status.InvalidArgument("truncated TFRecord record")
        yield data[start:start + length]
        offset = start + length + 4


def _prediction_log_inputs(data: bytes) -> list[dict[str, np.ndarray]]:
    batches = []
    for record in _tfrecords(data):
        log = apis.PredictionLog()
        try:
            log.ParseFromString(record)
        except DecodeError as exc:
            raise status.InvalidArgument(f"a TFRecord record is not a PredictionLog: {exc}") from None
        if log.WhichOneof("log_type") == "predict_log" and log.predict_log.HasField("request"):
            batches.append({k: codec.tensor_proto_to_ndarray(v) for k, v in log.predict_log.request.inputs.items()})
    if not batches:
        raise status.InvalidArgument("no PredictionLog record with a predict_log request (only Predict is replayed)")
    return batches


def _rest_body_inputs(body: Any, dtypes: Mapping[str, DTypeLike]) -> dict[str, np.ndarray]:
    if "inputs" in body:
        inputs = body["inputs"]
        if not isinstance(inputs, Mapping):
            (name,) = dtypes or ("inputs",)
            inputs = {name: inputs}
        return {k: np.asarray(v, dtype=dtypes.get(k)) for k, v in inputs.items()}
    if "instances" in body:
        rows = body["instances"]
        if rows and isinstance(rows[0], Mapping):
            return {k: np.asarray([r[k] for r in rows], dtype=dtypes.get(k)) for k in rows[0]}
        (name,) = dtypes or ("inputs",)
        return {name: np.asarray(rows, dtype=dtypes.get(name))}
    raise status.InvalidArgument('a REST body has "inputs" or "instances"')


def stable_manifest(version_dir: Optional[Path]) -> Optional[Manifest]:
    """The exporter's manifest of ``version_dir``, if it has one (a SavedModel from elsewhere may not)."""
    if version_dir is None or not (version_dir / "manifest.json").is_file():
        return None
    return load_manifest(version_dir)


def load_inputs(source: str, version_dir: Optional[Path], *, batch_size: int = 1,
                signature: str = codec.DEFAULT_SIGNATURE, window: Window = Window(),
                model: Optional[str] = None) -> list[dict[str, np.ndarray]]:
    """Batches of inputs to replay: ``manifest``, ``warmup``, a capture (in ``window``, of ``model``), or the
    path of a user's file (see the module docstring)."""
    capture = source not in ("manifest", "warmup") and is_capture_source(source)
    if (window.since is not None or window.until is not None) and not capture:
        raise CaptureSourceError(f"--since/--until select requests of a capture; --inputs {source} is not one")
    if capture:
        return captured_inputs(source, version_dir, signature=signature, window=window, model=model)
    if source in ("manifest", "warmup"):
        if version_dir is None or not version_dir.is_dir():
            raise status.NotFound(f"no version directory to read {source} inputs from ({version_dir})")
        if source == "warmup":
            return _prediction_log_inputs(Path(warmup_path(version_dir)).read_bytes())
        return _batches(load_manifest(version_dir).golden_inputs(signature), batch_size)
    path = Path(source)
    if path.suffix == ".npz":
        with np.load(path) as npz:
            return _batches({k: npz[k] for k in npz.files}, batch_size)
    if path.suffix == ".json":
        dtypes = {}
        manifest = stable_manifest(version_dir)
        if manifest is not None:
            spec = manifest.signatures[signature]
            dtypes = {name: tensor.dtype for name, tensor in spec.inputs.items()}
        return _batches(_rest_body_inputs(json.loads(path.read_text()), dtypes), batch_size)
    return _prediction_log_inputs(path.read_bytes())




def captured_inputs(source: str, version_dir: Optional[Path], *, signature: str = codec.DEFAULT_SIGNATURE,
                    window: Window = Window(), model: Optional[str] = None) -> list[dict[str, np.ndarray]]:
    """The captured Predict requests of ``model`` on ``signature`` in ``window``, each as it was sent.

    Checked against the stable version's signature when ``version_dir`` has a manifest.
    """
    captured = read_source(source, window, model=model, flag="--inputs")
    records = [r for r in captured.records if r.signature == signature]
    if not records:
        called = ", ".join(sorted({r.signature for r in captured.records}))
        raise CaptureSourceError(f"--inputs {source}: no captured request calls signature {signature!r} (they call "
                                 f"{called}); give --signature")
    manifest = stable_manifest(version_dir)
    spec = manifest.signatures.get(signature) if manifest is not None else None
    batches, problems = [], []
    for index, record in enumerate(records):
        inputs = record.inputs()
        if spec is not None:
            problems += signature_problems(inputs, spec, f"captured request {index + 1} ({record.request_id or 'no id'})")
        batches.append(inputs)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CaptureSourceError(f"--inputs {source} does not fit the stable version: {problems[0]}{more}")
    return batches
