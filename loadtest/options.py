"""The options every ``python -m loadtest`` subcommand shares: the target model, its payload, server addresses.

The spellings are the project's CLI vocabulary: ``--version N`` / ``--label
NAME`` for a version, ``--model-repo DIR`` for the model repository (default
``<checkout>/models``), ``--grpc HOST:PORT`` and ``--rest URL`` for a server.

A server address says its protocol, by the rule of ``serving.addresses``
(every CLI's): ``--rest`` takes an ``http://`` or ``https://`` URL, ``--grpc``
takes ``HOST:PORT`` or ``grpc://HOST:PORT`` (or a gRPC target such as
``unix:///path``). The flags parse with it (argparse ``type=``); a
``--protocol`` with no address of its kind is a ``UsageError`` naming both.

TLS and credentials are the SDK's arguments (``serving.client.
add_connection_arguments``: ``--root-certificates``, ``--api-key-file``,
``--client-certificate``, ...). :func:`server_from_args` resolves what a load
goes to: without ``--grpc``/``--rest``, the stack ``make up`` started (its
``stack.json``, ``serving.stack.endpoint``) with its CA and the ``loadtest``
credential (else ``client``); with an address and no credential given, the
stack's connection when the address is the stack's.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from exporter.capture_source import add_window_arguments
from loadtest import DEFAULT_MODEL_REPO
from loadtest.payloads import Target
from serving import addresses
from serving.client import Connection, add_connection_arguments, connection_from_args
from serving.codec import parse_shape
from serving.config.served_config import DEFAULT_WORK_DIR
from serving.stack.endpoint import stack_endpoint

__all__ = [
    "CONNECTION_ENV",
    "LOAD_ROLE",
    "connection_environment",
    "PROTOCOLS",
    "Server",
    "UsageError",
    "add_server_arguments",
    "server_from_args",
    "add_target_arguments",
    "targets_from_args",
    "grpc_address",
    "rest_address",
    "server_address",
    "parse_protocols",
    "protocols_for",
]

PROTOCOLS = ("grpc", "rest")
LOAD_ROLE = "loadtest"   # the gateway credential a load uses by default (make certs issues it)
# The environment a locust process reads its connection from (loadtest.users); never its command line.
CONNECTION_ENV = ("LOCUST_ROOT_CERTIFICATES", "LOCUST_CLIENT_CERTIFICATE", "LOCUST_CLIENT_KEY", "LOCUST_SERVER_NAME",
                  "TFS_API_KEY", "TFS_BEARER_TOKEN")


def connection_environment(connection: Connection) -> dict[str, str]:
    """``connection`` as :data:`CONNECTION_ENV` values (unset ones left out): PEM file paths and the credentials."""
    values = dict(zip(CONNECTION_ENV, (connection.root_certificates, connection.client_cert, connection.client_key,
                                       connection.server_name, connection.api_key, connection.bearer_token)))
    return {name: str(Path(value).resolve()) if isinstance(value, Path) else str(value)
            for name, value in values.items() if value}


class UsageError(ValueError):
    """Flags that contradict each other; the CLI prints the message and exits 2."""


def _shape_argument(text: str) -> tuple[str, tuple[int, ...]]:
    try:
        return parse_shape(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """The target model (``--model``, ``--variant``, ``--signature``, ``--version``/``--label``) and its payload."""
    group = parser.add_argument_group("target model")
    group.add_argument("--model", default="digits", help="model name (default digits)")
    group.add_argument("--variant", default="fp32", help="fp32 | xla | trt-fp16 (sweep: comma list)")
    group.add_argument("--signature", default=None, help="signature name (default serving_default)")
    which = group.add_mutually_exclusive_group()
    which.add_argument("--version", type=int, default=None, metavar="N", help="a specific version (default: latest)")
    which.add_argument("--label", default=None, metavar="NAME", help="a version label, e.g. stable")
    group.add_argument("--model-repo", type=Path, default=DEFAULT_MODEL_REPO, metavar="DIR",
                       help=f"model repository with <name>/<version>/manifest.json (default {DEFAULT_MODEL_REPO}); "
                            "a model without a manifest there is loaded from --input-data or the server's metadata")
    payload = parser.add_argument_group(
        "request payload (first source that applies: --input-data, the model's manifest, the server's metadata)")
    payload.add_argument("--input-data", type=Path, default=None, metavar="FILE|CAPTURE",
                         help="the request inputs: an .npz (one array per input), a TF Serving REST Predict "
                              "body (.json, typed by the server's metadata), or a request capture (a capture "
                              "file or directory, with --since/--until): the recorded mix of requests, each as "
                              "it was sent; replay it at its recorded times with --replay-rate recorded")
    add_window_arguments(payload, "--input-data")
    payload.add_argument("--batch-size", type=int, default=None, metavar="N",
                         help="rows per request (default: 1, or the --input-data file's rows as they are)")
    payload.add_argument("--shape", type=_shape_argument, action="append", default=[], metavar="NAME:d1,d2",
                         help="dimensions after the batch of an input the metadata leaves unknown (repeatable)")


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """The SDK's "TLS and credentials" group, and ``--work-dir`` (make up's, whose stack is the default server)."""
    add_connection_arguments(parser)
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR, metavar="DIR",
                        help=f"make up's work directory: without --grpc/--rest, the stack its stack.json records "
                             f"is loaded, with its CA and the loadtest key (default {DEFAULT_WORK_DIR})")


@dataclass(frozen=True)
class Server:
    """What a load goes to: a gRPC target and/or a REST URL, and how to connect (``describe()`` says which)."""

    grpc: Optional[str]
    rest: Optional[str]
    connection: Connection
    source: str = ""
    role: str = ""   # the stack credential's role when the connection is the stack's ("" otherwise)

    def address(self, protocol: str) -> Optional[str]:
        return self.grpc if protocol == "grpc" else self.rest


def server_from_args(args: argparse.Namespace, *, protocol: Optional[str] = "grpc",
                     required: bool = True) -> Optional[Server]:
    """The server of ``--grpc``/``--rest`` and the connection arguments, defaulting to make up's stack.

    Without an address: the stack's ``protocol`` address (None: both), (``required``: a ``UsageError``
    when no stack is recorded; else None). With an address and no TLS argument or credential: the stack's connection
    when the address is the stack's, else none.
    """
    try:
        connection = connection_from_args(args)
    except ValueError as error:
        raise UsageError(str(error)) from None
    grpc, rest = getattr(args, "grpc", None), getattr(args, "rest", None)
    if grpc or rest:
        if not connection.given:
            stack = stack_endpoint(role=LOAD_ROLE, work_dir=args.work_dir)
            if stack is not None and ((grpc and grpc == stack.grpc) or
                                      (rest and rest.rstrip("/") == stack.rest.rstrip("/"))):
                return Server(grpc, rest, stack.connection, _described(stack.backend, stack.role), stack.role)
        return Server(grpc, rest, connection)
    stack = stack_endpoint(role=LOAD_ROLE, work_dir=args.work_dir)
    if stack is None:
        if required:
            raise UsageError(f"give --grpc HOST:PORT or --rest URL: no stack is recorded in {args.work_dir} "
                             "(make up records the one it starts)")
        return None
    chosen, role = (stack.connection, stack.role) if not connection.given else (connection, "")
    grpc = stack.grpc if protocol in ("grpc", None) else None
    rest = stack.rest if protocol in ("rest", None) else None
    return Server(grpc, rest, chosen, _described(stack.backend, role), role)


def _described(backend: str, role: str) -> str:
    return f"the stack make up started ({backend}" + (f", the {role} key)" if role else ")")


def targets_from_args(args: argparse.Namespace) -> list[Target]:
    """One ``Target`` per variant of ``--variant`` (a comma list)."""
    return [Target(model=args.model, variant=variant, signature=args.signature, version=args.version,
                   version_label=args.label, batch_size=args.batch_size, model_repo=args.model_repo,
                   input_data=args.input_data, shapes=tuple(args.shape), since=args.since, until=args.until)
            for variant in args.variant.split(",")]


def server_address(protocol: str, address: str, flag: str = "") -> str:
    """``address`` checked against ``protocol`` by ``serving.addresses`` (the one rule of every CLI).

    ``flag`` (default ``--PROTOCOL``) names it in the ``UsageError``.
    """
    if protocol not in PROTOCOLS:
        raise UsageError(f"protocol must be grpc or rest, got {protocol!r}")
    try:
        return addresses.server_address(protocol, address)
    except addresses.AddressError as error:
        raise UsageError(f"{flag or '--' + protocol}: {error}") from None


def grpc_address(address: str, flag: str = "--grpc") -> str:
    """``server_address("grpc", address, flag)``: ``HOST:PORT``."""
    return server_address("grpc", address, flag)


def rest_address(address: str, flag: str = "--rest") -> str:
    """``server_address("rest", address, flag)``: an ``http(s)://`` URL."""
    return server_address("rest", address, flag)


def parse_protocols(text: str) -> list[str]:
    """``--protocol``'s value: ``grpc``, ``rest`` or ``grpc,rest``."""
    protocols = [p.strip() for p in text.split(",") if p.strip()]
    if not protocols or any(p not in PROTOCOLS for p in protocols):
        raise UsageError(f"--protocol takes grpc, rest or grpc,rest, got {text!r}")
    return protocols


def protocols_for(requested: Optional[str], grpc: Optional[str], rest: Optional[str]) -> list[str]:
    """The protocols a run against a running server loads: ``--protocol``'s, each backed by its address.

    Without ``--protocol``: every protocol that has an address (gRPC first).
    """
    given = {"grpc": grpc, "rest": rest}
    if requested is None:
        return [p for p in PROTOCOLS if given[p]]
    protocols = parse_protocols(requested)
    for protocol in protocols:
        if not given[protocol]:
            other = "rest" if protocol == "grpc" else "grpc"
            flag = "--grpc HOST:PORT" if protocol == "grpc" else "--rest URL"
            raise UsageError(f"--protocol {protocol} contradicts the server given: only --{other} {given[other]} "
                             f"was given; add {flag}, or use --protocol {other}")
    return protocols
