"""``python -m serving.client``: call a model from the shell and print JSON.

    python -m serving.client predict  (--grpc HOST:PORT | --rest URL) --model NAME
                                      [--version N | --label L] [--signature S]
                                      --input BODY.json|FILE.npz|FILE.npy|INPUTS.json [--timeout SEC]
    python -m serving.client metadata (--grpc ... | --rest ...) --model NAME [--version N | --label L]
    python -m serving.client status   (--grpc ... | --rest ...) --model NAME [--version N | --label L]
    python -m serving.client classify|regress (--grpc ... | --rest ...) --model NAME [--signature S]
                                      --input EXAMPLES.json

Every command also takes TLS and credentials, as every tool of the stack
does (``serving.client.connection``): ``--root-certificates FILE`` (PEM of
the CAs to trust), ``--client-certificate FILE`` (alias ``--client-cert``)
and ``--client-key FILE`` (mutual TLS), ``--server-name NAME`` (the name the
server's certificate carries), ``--api-key-file FILE`` or ``--api-key KEY``
(defaults: ``$TFS_API_KEY_FILE``, ``$TFS_API_KEY``; sent as ``x-api-key``;
prefer the file or the environment: a flag is visible in ``/proc``),
``--bearer-token TOKEN`` (sent as ``authorization: Bearer``) and
``--insecure``. Over gRPC, any TLS flag turns TLS on, and so does a
credential (with the system's CAs); over REST they need an ``https://`` URL.
A credential over plaintext needs ``--insecure``.

For predict, ``--input`` takes what curl would send: a TF Serving REST body
(``.json`` with ``instances`` or ``inputs``; its ``signature_name`` is used
unless ``--signature`` is given), decoded by the codec's REST request decode;
an ``.npz`` (one array per input name) or ``.npy`` (the only input); or a
``.json`` object of input name to nested lists (a bare list: the only input),
converted with the signature's dtypes. For classify/regress, the JSON is a
list of feature dicts or TF Serving's body ``{"examples": [...], "context":
{...}}``. A serving error prints ``{"error": ..., "code": ...}`` on stderr and
exits 1 (a failed TLS handshake also carries ``"tls": true``); a usage or
input error prints one line naming the rule and exits 2. No error prints a
traceback.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from serving import codec
from serving.addresses import grpc_address, rest_address
from serving.client._api import ClientApi
from serving.client._grpc import GrpcClient
from serving.client._rest import RestClient
from serving.client._types import ModelMetadata, Signature, TensorSpec, VersionStatus
from serving.client.connection import add_connection_arguments, connection_from_args
from serving.client.errors import TlsError
from serving.status import ServingError

__all__ = ["main", "build_parser", "make_client", "InputError", "InputFile", "read_input", "load_inputs"]


_INPUT_FORMS = """\
predict --input takes any of (one example each):
  a TF Serving REST body (.json; its signature_name is used unless --signature is given):
      {"signature_name": "serving_default", "instances": [{"x": [1.0, 2.0]}]}  (or "inputs": {"x": [[1.0, 2.0]]})
  an .npz of one array per input name (an .npy: the signature's only input):
      python -c 'import numpy as np; np.savez("in.npz", x=np.ones((1, 2), np.float32))'
  a JSON object of input name to array (a bare list: the only input):
      {"x": [[1.0, 2.0]]}
JSON values take the signature's dtypes. Exit codes: 0 done, 1 the server refused or failed
({"error": ..., "code": ...} on stderr), 2 a usage or input error (one line on stderr)."""


class InputError(ValueError):
    """A usage or input mistake found before (or instead of) a call: one line on stderr, exit 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m serving.client", description="Call TF Serving; print JSON.",
                                     epilog=_INPUT_FORMS, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["predict", "classify", "regress", "metadata", "status"])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--grpc", metavar="HOST:PORT", type=grpc_address, help="the server's gRPC address")
    where.add_argument("--rest", metavar="URL", type=rest_address,
                       help="the server's REST URL, http://HOST:PORT (https:// through a TLS gateway)")
    parser.add_argument("--model", required=True)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--version", type=int, metavar="N", help="a specific version (default: the latest)")
    which.add_argument("--label", metavar="NAME", help="a version label, e.g. stable")
    parser.add_argument("--signature", help="signature name (default: a REST body's signature_name, "
                                            "else serving_default)")
    parser.add_argument("--input", type=Path, metavar="FILE",
                        help="predict: a REST body (.json), .npz, .npy or {name: array} (.json), see below; "
                             "classify, regress: examples (.json)")
    parser.add_argument("--timeout", type=float, default=30.0)
    add_connection_arguments(parser)
    return parser


def make_client(args: argparse.Namespace) -> Union[GrpcClient, RestClient]:
    """The client the parsed arguments ask for; ``InputError`` for TLS files or keys that cannot be used."""
    try:
        security = connection_from_args(args).client_kwargs()
        if args.grpc:
            return GrpcClient(args.grpc, timeout=args.timeout, **security)
        return RestClient(args.rest, timeout=args.timeout, **security)
    except (ValueError, OSError) as exc:
        raise InputError(str(exc)) from None


@dataclass(frozen=True)
class InputFile:
    """A predict ``--input`` file as read: arrays (.npy/.npz) or a JSON document, typed once a signature is known."""

    path: Path
    arrays: Optional[Union[np.ndarray, dict[str, np.ndarray]]] = None
    document: Any = None   # the parsed --input: its shape is checked where it is read

    @property
    def is_rest_body(self) -> bool:
        """A TF Serving REST Predict body: an object with ``instances`` or ``inputs``."""
        return isinstance(self.document, dict) and bool({"instances", "inputs"} & set(self.document))

    def signature_name(self, override: Optional[str]) -> Optional[str]:
        """``override`` (``--signature``), else a REST body's ``signature_name``, else None (the default)."""
        name = self.document.get("signature_name") if self.is_rest_body else None
        return override or (name if isinstance(name, str) else None)


def read_input(path: Path) -> InputFile:
    """``--input`` read by its suffix; ``InputError`` for a missing, unreadable or unknown file."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            return InputFile(path, arrays=np.load(path, allow_pickle=False))
        if suffix == ".npz":
            return InputFile(path, arrays=codec.load_inputs(path))
        if suffix == ".json":
            return InputFile(path, document=codec.json_loads(path.read_bytes()))
    except ServingError as exc:
        raise InputError(f"--input {path}: not JSON: {exc.details}") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"--input {path}: {getattr(exc, 'strerror', None) or exc}") from None
    raise InputError(f"--input {path}: must be .json (a REST body or {{name: array}}), .npz or .npy")


def load_inputs(source: InputFile, signature: Optional[Signature]) -> Union[np.ndarray, dict[str, np.ndarray]]:
    """The request's inputs; JSON takes the signature's dtypes (a REST body through the REST frontend's decode)."""
    if source.arrays is not None:
        return source.arrays
    specs = signature.inputs if signature else {}
    try:
        if source.is_rest_body:
            inputs, _ = codec.rest_request_to_inputs(source.document, {k: s.dtype for k, s in specs.items()})
            return inputs
        if isinstance(source.document, dict):
            return {name: _json_input(item, specs.get(name)) for name, item in source.document.items()}
        return _json_input(source.document, next(iter(specs.values())) if len(specs) == 1 else None)
    except ServingError as exc:
        raise InputError(f"--input {source.path}: {exc.details}") from None
    except (ValueError, TypeError) as exc:
        raise InputError(f"--input {source.path}: {exc}") from None


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


def _run(client: ClientApi, args: argparse.Namespace) -> object:
    where = {"version": args.version, "label": args.label, "timeout": args.timeout}
    if args.command == "metadata":
        return _jsonable_metadata(client.metadata(args.model, **where))
    if args.command == "status":
        return _jsonable_status(client.status(args.model, **where))
    if args.input is None:
        raise InputError(f"{args.command} needs --input FILE")
    if args.command in ("classify", "regress"):
        return _examples_call(client, args, where)
    return _predict(client, args, where)


def _predict(client: ClientApi, args: argparse.Namespace, where: dict) -> object:
    source = read_input(args.input)
    name = source.signature_name(args.signature)
    signature = None
    if source.document is not None:
        meta = client.metadata(args.model, **where)
        signature = meta.signatures.get(name or codec.DEFAULT_SIGNATURE)
        if signature is None:
            known = ", ".join(k for k in meta.signatures if not k.startswith("__"))
            raise InputError(f"model {args.model!r} has no signature {name or codec.DEFAULT_SIGNATURE!r}; "
                             f"its signatures: {known}")
    inputs = load_inputs(source, signature)
    try:
        outputs = client.predict(args.model, inputs, signature=name, **where)
    except (ValueError, TypeError) as exc:  # refused by the client before sending
        raise InputError(f"--input {args.input}: {exc}") from None
    return {"outputs": {key: codec.array_to_json(value, as_b64=key.endswith(codec.BYTES_SUFFIX))
                        for key, value in outputs.items()}}


def _examples_call(client: ClientApi, args: argparse.Namespace, where: dict) -> object:
    try:
        doc: Any = codec.json_loads(args.input.read_bytes())   # the SDK refuses examples of a wrong shape
    except ServingError as exc:
        raise InputError(f"--input {args.input}: not JSON: {exc.details}") from None
    except OSError as exc:
        raise InputError(f"--input {args.input}: {exc.strerror}") from None
    examples: Any = doc.get("examples") if isinstance(doc, dict) else doc
    context: Any = doc.get("context") if isinstance(doc, dict) else None
    call = client.classify if args.command == "classify" else client.regress
    try:
        results = call(args.model, examples, context=context, signature=args.signature, **where)
    except (ValueError, TypeError) as exc:
        raise InputError(f"--input {args.input}: {exc}") from None
    return {"results": results if args.command == "classify" else np.asarray(results).tolist()}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse ``argv``, make one call, print its JSON; 0 on success, 1 on a serving error, 2 on a usage error.

    Nothing prints a traceback: a serving error is ``{"error", "code"}`` JSON on
    stderr, a usage or input error one line naming the rule.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with make_client(args) as client:
            result = _run(client, args)
    except InputError as exc:
        sys.stderr.write(f"{parser.prog} {args.command}: error: {exc}\n")
        return 2
    except ServingError as exc:
        report = {"error": exc.details, "code": exc.code.name, **({"tls": True} if isinstance(exc, TlsError) else {})}
        sys.stderr.write(codec.json_dumps(report).decode() + "\n")
        return 1
    except Exception as exc:  # noqa: BLE001 - the last resort: one line, never a traceback
        sys.stderr.write(f"{parser.prog} {args.command}: error: {type(exc).__name__}: {exc}\n")
        return 1
    sys.stdout.write(codec.json_dumps(result).decode() + "\n")
    return 0
