"""Request payloads for any model on any TF Serving, built once.

The inputs of a load test's one request come from the first source that applies:

1. ``--input-data FILE`` (``Target.input_data``): an ``.npz`` with one array per
   input, a TF Serving REST Predict body (``.json``) whose dtypes come from
   the server's metadata (``serving.codec.load_inputs``), or a request capture
   (a capture file or directory, ``Target.since``/``until`` its window): every
   captured Predict request of the model, as it was sent (``Payload.mix``);
2. the exporter's ``manifest.json`` of the version under ``--model-repo``: its
   real sample inputs (digits images, strings for ``text``, ranker features);
3. the server's ``GetModelMetadata`` (gRPC or REST): inputs synthesized per
   dtype and shape (``serving.codec.synthesize_inputs``). The batch dimension
   is the batch size; another unknown dimension must be given with
   ``--shape NAME:d1,d2`` (``Target.shapes``), else a ``PayloadError`` asks for it.

The batch size is ``Target.batch_size``; unset, one row (a file's rows as they
are). A load generator must stay cheap, so everything a request needs is
encoded here once: the serialized ``PredictRequest`` bytes for gRPC (sent with
identity serializers) and the JSON body for REST. ``Payload.source`` says where
the inputs came from. ``write_payload`` / ``read_payload`` hand a built payload
to another process (the locust subprocess) as a file, so the inputs are chosen
and encoded once per run.
"""
from __future__ import annotations

import base64
import dataclasses
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union

import numpy as np

from exporter.capture_source import CaptureSourceError, Window, is_capture_source, read_source
from exporter.manifest import MANIFEST_FILE, load_manifest
from loadtest import DEFAULT_MODEL_REPO
from serving.client import NO_RETRY, Connection, GrpcClient, RestClient, ServingError
from serving.codec import (
    DEFAULT_SIGNATURE,
    Signature,
    decode_predict_request,
    encode_predict_request,
    inputs_to_rest_request,
    load_inputs,
    synthesize_inputs,
)
from serving.model_repo import latest_version_dir, published_name
from serving.wire import PREDICT
from serving.wire import serving_apis_pb2 as apis

if TYPE_CHECKING:
    from serving.codec import JSON


__all__ = [
    "Target",
    "Payload",
    "RecordedRequest",
    "PayloadError",
    "build_payload",
    "server_signature",
    "write_payload",
    "read_payload",
    "published_name",  # re-exported from serving.model_repo, where the rule is defined
]

Shapes = tuple[tuple[str, tuple[int, ...]], ...]
METADATA_TIMEOUT_S = 15.0


class PayloadError(ValueError):
    """No request can be built: the message names the model, the source tried and what to give instead."""


@dataclass(frozen=True)
class Target:
    """What the load is aimed at (model, variant, signature, version or label) and how its payload is made.

    ``version`` and ``version_label`` are exclusive (a ``ModelSpec`` holds one);
    with neither, the server's latest version answers. ``batch_size`` is the
    number of rows per request (None: one row, or an input file's rows as they
    are); rows are cycled when the source holds fewer. ``input_data`` is a
    user's ``.npz`` or REST JSON file; ``shapes`` gives the dimensions after
    the batch of inputs that the server's metadata leaves unknown.
    """

    model: str = "digits"
    variant: str = "fp32"
    signature: Optional[str] = None
    version: Optional[int] = None
    version_label: Optional[str] = None
    batch_size: Optional[int] = None
    model_repo: Path = DEFAULT_MODEL_REPO
    input_data: Optional[Path] = None
    shapes: Shapes = ()
    since: Optional[float] = None   # with a capture as input_data: its time window (unix seconds)
    until: Optional[float] = None

    def __post_init__(self) -> None:
        if self.version is not None and self.version_label:
            raise ValueError("give a version or a version label, not both")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.version_label and not re.fullmatch(r"[A-Za-z0-9_]+", self.version_label):
            raise ValueError(f"version labels are [a-zA-Z0-9_]+, got {self.version_label!r}")

    @property
    def name(self) -> str:
        return published_name(self.model, self.variant)

    @property
    def signature_name(self) -> str:
        return self.signature or DEFAULT_SIGNATURE

    def version_dir(self) -> Path:
        model_dir = Path(self.model_repo) / self.name
        if self.version is not None:
            return model_dir / str(self.version)
        return latest_version_dir(model_dir)

    def manifest_dir(self) -> Optional[Path]:
        """The version directory under ``model_repo`` that holds a manifest, or None."""
        try:
            version_dir = self.version_dir()
        except FileNotFoundError:
            return None
        return version_dir if (version_dir / MANIFEST_FILE).is_file() else None

    def replace(self, **changes: Any) -> "Target":
        # Any: the changes go to dataclasses.replace, which types them so (each field has its own type)
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class RecordedRequest:
    """One captured request as it is replayed: when it came (unix seconds) and its ``PredictRequest`` bytes
    (the capture's own, with the target's model name and version); the REST body holds the same inputs."""

    time: float
    grpc_request: bytes

    @functools.cached_property
    def rest_body(self) -> bytes:
        request = apis.PredictRequest.FromString(self.grpc_request)
        return inputs_to_rest_request(decode_predict_request(self.grpc_request),
                                      signature_name=request.model_spec.signature_name or DEFAULT_SIGNATURE,
                                      row_format=True)


@dataclass(frozen=True)
class Payload:
    """One prebuilt request, in both wire forms, and where its inputs came from.

    From a capture, ``mix`` holds every captured request in time order (the
    recorded payload mix: a load sends them in turn, or at their recorded times,
    ``loadtest.replay``); the single request is then the first of them.
    """

    model_name: str
    signature_name: str
    inputs: Mapping[str, np.ndarray]
    grpc_method: str
    grpc_request: bytes
    rest_path: str
    source: str = ""
    mix: tuple[RecordedRequest, ...] = ()

    @functools.cached_property
    def rest_body(self) -> bytes:
        """The REST ``:predict`` JSON body (row format), encoded on first use."""
        return inputs_to_rest_request(dict(self.inputs), signature_name=self.signature_name, row_format=True)

    @property
    def label(self) -> str:
        """A short name for stats tables: ``digits:serving_default``."""
        return f"{self.model_name}:{self.signature_name}"

    def describe(self) -> dict[str, JSON]:
        """For reports: the source and each input's dtype and shape."""
        described: dict[str, JSON] = {
            "source": self.source, "signature": self.signature_name,
            "inputs": {name: f"{_dtype_name(array)}{list(array.shape)}" for name, array in self.inputs.items()}}
        if self.mix:
            described["recorded_requests"] = len(self.mix)
            described["recorded_seconds"] = round(self.mix[-1].time - self.mix[0].time, 6)
        return described


def _dtype_name(array: np.ndarray) -> str:
    return "string" if array.dtype.kind in "OSU" else array.dtype.name


def build_payload(target: Target, *, grpc: Optional[str] = None, rest: Optional[str] = None,
                  connection: Connection = Connection()) -> Payload:
    """Encode one request for ``target`` from the first source that applies (see the module docstring).

    ``grpc`` (``HOST:PORT``) or ``rest`` (a URL) is the server asked for the
    metadata when a source needs it (gRPC when both are given), over
    ``connection`` (TLS and a credential). PayloadError when no source gives inputs.
    """
    if target.input_data is not None and is_capture_source(target.input_data):
        return _capture_payload(target, target.input_data)
    if target.since is not None or target.until is not None:
        raise PayloadError("--since/--until select requests of a capture: give --input-data a capture file or "
                           "directory")
    inputs, source = _inputs(target, grpc, rest, connection)
    return Payload(
        model_name=target.name,
        signature_name=target.signature_name,
        inputs=inputs,
        grpc_method=PREDICT,
        grpc_request=encode_predict_request(target.name, inputs, version=target.version,
                                            version_label=target.version_label,
                                            signature_name=target.signature_name),
        rest_path=_rest_path(target),
        source=source,
    )


def _capture_payload(target: Target, input_data: Path) -> Payload:
    """Every captured Predict request of ``target``'s model (its signature's, when one is named), in time order,
    re-addressed to ``target`` (name, version or label); PayloadError naming the rule when none is left."""
    if target.batch_size is not None:
        raise PayloadError("--batch-size does not apply to a capture: each captured request keeps its own rows")
    try:
        captured = read_source(input_data, Window(target.since, target.until), model=target.name,
                               flag="--input-data")
    except CaptureSourceError as error:
        raise PayloadError(str(error)) from None
    records = [r for r in captured.records if target.signature is None or r.signature == target.signature]
    if not records:
        raise PayloadError(f"--input-data {target.input_data}: no captured request calls signature "
                           f"{target.signature!r}; they call {', '.join(sorted({r.signature for r in captured.records}))}")
    mix = tuple(RecordedRequest(r.time, _readdressed(r.request, target)) for r in records)
    first = records[0]
    return Payload(model_name=target.name, signature_name=first.signature, inputs=first.inputs(),
                   grpc_method=PREDICT, grpc_request=mix[0].grpc_request, rest_path=_rest_path(target),
                   source=captured.describe(), mix=mix)


def _readdressed(request: object, target: Target) -> bytes:
    """The captured ``PredictRequest`` with ``target``'s model name and version (or label, or neither: the
    latest); its inputs, output filter and signature as they were."""
    copy = apis.PredictRequest()
    copy.CopyFrom(request)
    copy.model_spec.name = target.name
    copy.model_spec.ClearField("version")
    copy.model_spec.ClearField("version_label")
    if target.version is not None:
        copy.model_spec.version.value = target.version
    elif target.version_label:
        copy.model_spec.version_label = target.version_label
    return copy.SerializeToString()


def _inputs(target: Target, grpc: Optional[str], rest: Optional[str],
            connection: Connection) -> tuple[dict[str, np.ndarray], str]:
    if target.input_data is not None:
        return _file_inputs(target, target.input_data, grpc, rest, connection)
    manifest_dir = target.manifest_dir()
    if manifest_dir is not None:
        manifest = load_manifest(manifest_dir)
        try:
            inputs = manifest.sample_inputs(target.signature_name, batch_size=target.batch_size or 1)
        except KeyError as error:
            raise PayloadError(error.args[0]) from None
        return inputs, f"manifest {manifest_dir / MANIFEST_FILE}"
    signature = server_signature(target, grpc=grpc, rest=rest, connection=connection)
    try:
        inputs = synthesize_inputs(signature, target.batch_size or 1, shapes=dict(target.shapes))
    except ValueError as error:
        raise PayloadError(f"model {target.name!r} (no manifest under {target.model_repo}): {error}") from None
    return inputs, f"synthesized from the metadata of {target.name!r} at {_server_name(grpc, rest)}"


def _file_inputs(target: Target, input_data: Path, grpc: Optional[str], rest: Optional[str],
                 connection: Connection) -> tuple[dict[str, np.ndarray], str]:
    path = Path(input_data)
    signature = (server_signature(target, grpc=grpc, rest=rest, connection=connection) if path.suffix == ".json"
                 else None)
    try:
        inputs = load_inputs(path, signature)
    except ValueError as error:
        raise PayloadError(f"--input-data {error}") from None
    rows = {len(array) if array.ndim else 0 for array in inputs.values()}
    if len(rows) != 1 or 0 in rows:
        raise PayloadError(f"--input-data {path}: every input needs the same batch dimension first, got "
                           + ", ".join(f"{k} {list(v.shape)}" for k, v in inputs.items()))
    if target.batch_size is not None:
        take = np.arange(target.batch_size) % rows.pop()
        inputs = {name: array[take] for name, array in inputs.items()}
    return inputs, f"input file {path}"


def server_signature(target: Target, *, grpc: Optional[str] = None, rest: Optional[str] = None,
                     connection: Connection = Connection()) -> Signature:
    """``target``'s signature as the server's ``GetModelMetadata`` describes it (gRPC when both are given)."""
    client: GrpcClient | RestClient
    if grpc:
        client = GrpcClient(grpc, retry=NO_RETRY, timeout=METADATA_TIMEOUT_S, **connection.client_kwargs())
    elif rest:
        client = RestClient(rest, retry=NO_RETRY, timeout=METADATA_TIMEOUT_S, **connection.client_kwargs())
    else:
        raise PayloadError(f"model {target.name!r} has no manifest under {target.model_repo} and no server was "
                           "given to read its metadata from; give --grpc or --rest, or --input-data FILE")
    try:
        with client:
            metadata = client.metadata(target.name, version=target.version, label=target.version_label)
    except ServingError as error:
        raise PayloadError(f"cannot read the metadata of model {target.name!r} from {_server_name(grpc, rest)}: "
                           f"{error.code.name}: {error.details}") from None
    try:
        return metadata.signatures[target.signature_name]
    except KeyError:
        raise PayloadError(f"model {target.name!r} at {_server_name(grpc, rest)} has no signature "
                           f"{target.signature_name!r}; its signatures: "
                           f"{', '.join(k for k in metadata.signatures if not k.startswith('__'))}") from None


def _server_name(grpc: Optional[str], rest: Optional[str]) -> str:
    return f"grpc {grpc}" if grpc else f"rest {rest}"


def _rest_path(target: Target) -> str:
    path = f"/v1/models/{target.name}"
    if target.version is not None:
        path += f"/versions/{target.version}"
    elif target.version_label:
        path += f"/labels/{target.version_label}"
    return path + ":predict"


def write_payload(payload: Payload, path: Union[str, Path]) -> Path:
    """Write ``payload`` as JSON (the PredictRequest bytes in base64) for ``read_payload`` in another process."""
    path = Path(path)
    path.write_text(json.dumps({
        "model_name": payload.model_name, "signature_name": payload.signature_name,
        "grpc_method": payload.grpc_method, "rest_path": payload.rest_path, "source": payload.source,
        "grpc_request": base64.b64encode(payload.grpc_request).decode("ascii"),
        "mix": [[r.time, base64.b64encode(r.grpc_request).decode("ascii")] for r in payload.mix]}))
    return path


def read_payload(path: Union[str, Path]) -> Payload:
    """The payload ``write_payload`` wrote; the inputs are decoded from its PredictRequest bytes."""
    doc = json.loads(Path(path).read_text())
    request = base64.b64decode(doc["grpc_request"])
    return Payload(model_name=doc["model_name"], signature_name=doc["signature_name"],
                   inputs=decode_predict_request(request), grpc_method=doc["grpc_method"],
                   grpc_request=request, rest_path=doc["rest_path"], source=doc["source"],
                   mix=tuple(RecordedRequest(t, base64.b64decode(r)) for t, r in doc.get("mix", [])))
