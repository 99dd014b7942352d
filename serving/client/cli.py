"""``python -m serving.client``: call a model from the shell and print JSON.

    python -m serving.client predict  (--grpc HOST:PORT | --rest URL) --model NAME
                                      [--version N | --label L] [--signature S]
                                      --input FILE.npy|FILE.npz|FILE.json [--timeout SEC]
    python -m serving.client metadata (--grpc ... | --rest ...) --model NAME [--version N | --label L]
    python -m serving.client status   (--grpc ... | --rest ...) --model NAME [--version N | --label L]
    python -m serving.client classify|regress (--grpc ... | --rest ...) --model NAME [--signature S]
                                      --input EXAMPLES.json

Every command also takes TLS and credentials, as the SDK's clients do:
``--root-certificates FILE`` (PEM of the CAs to trust), ``--client-cert FILE``
and ``--client-key FILE`` (mutual TLS), ``--server-name NAME`` (the name the
server's certificate carries), ``--api-key KEY`` (default: the ``TFS_API_KEY``
environment variable; sent as ``x-api-key``) and ``--bearer-token TOKEN``
(sent as ``authorization: Bearer``). Over gRPC, any TLS flag turns TLS on;
over REST they need an ``https://`` URL.

For predict, ``.npy`` holds one array (the signature's only input); ``.npz``
one array per input name; ``.json`` a list (the only input) or an object of
input name to nested lists, converted with the signature's dtypes. For
classify/regress, the JSON is a list of feature dicts or TF Serving's body
``{"examples": [...], "context": {...}}``. Errors print
``{"error": ..., "code": ...}`` on stderr and exit 1 (a failed TLS handshake
also carries ``"tls": true``).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from serving import codec
from serving.client._api import ClientApi
from serving.client._grpc import GrpcClient
from serving.client._rest import RestClient
from serving.client._types import ModelMetadata, Signature, TensorSpec, VersionStatus
from serving.client.errors import TlsError
from serving.status import ServingError

__all__ = ["main", "build_parser", "make_client", "load_inputs"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m serving.client", description="Call TF Serving; print JSON.")
    parser.add_argument("command", choices=["predict", "classify", "regress", "metadata", "status"])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--grpc", metavar="HOST:PORT", help="the server's gRPC address")
    where.add_argument("--rest", metavar="URL",
                       help="the server's REST URL, http://HOST:PORT (https:// through a TLS gateway)")
    parser.add_argument("--model", required=True)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--version", type=int, metavar="N", help="a specific version (default: the latest)")
    which.add_argument("--label", metavar="NAME", help="a version label, e.g. stable")
    parser.add_argument("--signature")
    parser.add_argument("--input", type=Path, help=".npy, .npz or .json (predict); .json (classify, regress)")
    parser.add_argument("--timeout", type=float, default=30.0)
    tls = parser.add_argument_group("TLS and credentials")
    tls.add_argument("--root-certificates", type=Path, metavar="FILE",
                     help="PEM of the CAs that may sign the server's certificate (default: the system's)")
    tls.add_argument("--client-cert", type=Path, metavar="FILE", help="PEM client certificate (mutual TLS)")
    tls.add_argument("--client-key", type=Path, metavar="FILE", help="PEM key of --client-cert")
    tls.add_argument("--server-name", metavar="NAME",
                     help="the name the server's certificate carries, if not the host dialled")
    tls.add_argument("--api-key", metavar="KEY", help="sent as x-api-key (default: $TFS_API_KEY)")
    tls.add_argument("--bearer-token", metavar="TOKEN", help="sent as authorization: Bearer TOKEN")
    return parser


def make_client(args: argparse.Namespace) -> ClientApi:
    """The client the parsed arguments ask for; ``SystemExit`` for TLS files that cannot be used."""
    security = {"root_certificates": args.root_certificates, "client_cert": args.client_cert,
                "client_key": args.client_key, "server_name": args.server_name,
                "api_key": args.api_key or os.environ.get("TFS_API_KEY") or None,
                "bearer_token": args.bearer_token}
    try:
        if args.grpc:
            return GrpcClient(args.grpc, timeout=args.timeout, **security)
        return RestClient(args.rest, timeout=args.timeout, **security)
    except ValueError as exc:
        raise SystemExit(f"python -m serving.client: {exc}") from None


def load_inputs(path: Path, signature: Optional[Signature]) -> Union[np.ndarray, dict[str, np.ndarray]]:
    """Inputs from a file; JSON values take the signature's dtypes."""
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return np.load(path, allow_pickle=False)
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    if suffix != ".json":
        raise SystemExit(f"--input must be .npy, .npz or .json, not {path.name}")
    value = codec.json_loads(path.read_bytes())
    specs = signature.inputs if signature else {}
    if isinstance(value, dict):
        return {name: _json_input(item, specs.get(name)) for name, item in value.items()}
    only = next(iter(specs.values())) if len(specs) == 1 else None
    return _json_input(value, only)


def _json_input(value: Any, spec: Optional[TensorSpec]) -> np.ndarray:
    if spec is not None and spec.dtype is not None:
        return codec.json_to_array(value, spec.dtype)
    return np.asarray(value)


def _jsonable_metadata(meta: ModelMetadata) -> dict:
    def tensors(specs: Mapping[str, TensorSpec]) -> dict:
        return {name: {"dtype": codec.enum_from_dtype(s.dtype).name if s.dtype is not None else None,
                       "shape": None if s.shape is None else [-1 if d is None else d for d in s.shape],
                       "name": s.tensor_name} for name, s in specs.items()}
    return {"model": meta.model, "version": meta.version,
            "signatures": {key: {"method_name": sig.method_name, "inputs": tensors(sig.inputs),
                                 "outputs": tensors(sig.outputs)} for key, sig in meta.signatures.items()}}


def _jsonable_status(versions: Sequence[VersionStatus]) -> list:
    return [{"version": v.version, "state": v.state, "error_code": v.error_code.name,
             "error_message": v.error_message} for v in versions]


def _run(client: ClientApi, args: argparse.Namespace) -> Any:
    where = {"version": args.version, "label": args.label, "timeout": args.timeout}
    if args.command == "metadata":
        return _jsonable_metadata(client.metadata(args.model, **where))
    if args.command == "status":
        return _jsonable_status(client.status(args.model, **where))
    if args.input is None:
        raise SystemExit(f"{args.command} needs --input")
    if args.command in ("classify", "regress"):
        return _examples_call(client, args, where)
    signature = None
    if args.input.suffix.lower() == ".json":
        meta = client.metadata(args.model, **where)
        signature = meta.signatures.get(args.signature or codec.DEFAULT_SIGNATURE)
    inputs = load_inputs(args.input, signature)
    outputs = client.predict(args.model, inputs, signature=args.signature, **where)
    return {"outputs": {name: codec.array_to_json(value, as_b64=name.endswith(codec.BYTES_SUFFIX))
                        for name, value in outputs.items()}}


def _examples_call(client: ClientApi, args: argparse.Namespace, where: dict) -> Any:
    doc = codec.json_loads(args.input.read_bytes())
    examples, context = (doc.get("examples"), doc.get("context")) if isinstance(doc, dict) else (doc, None)
    call = client.classify if args.command == "classify" else client.regress
    results = call(args.model, examples, context=context, signature=args.signature, **where)
    return {"results": results if args.command == "classify" else results.tolist()}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse ``argv``, make one call, print its JSON; 0 on success, 1 on a serving error."""
    args = build_parser().parse_args(argv)
    client = make_client(args)
    try:
        with client:
            result = _run(client, args)
    except ServingError as exc:
        report = {"error": exc.details, "code": exc.code.name, **({"tls": True} if isinstance(exc, TlsError) else {})}
        sys.stderr.write(codec.json_dumps(report).decode() + "\n")
        return 1
    sys.stdout.write(codec.json_dumps(result).decode() + "\n")
    return 0
