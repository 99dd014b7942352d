"""How a command-line tool reaches a server: one argument group, one value, the SDK's keyword arguments.

Every CLI that calls the stack (``python -m serving.client``, ``loadtest``,
``serving.rollout``, ``serving.config``) spells TLS and credentials the same
way::

    parser = argparse.ArgumentParser()
    add_connection_arguments(parser)
    args = parser.parse_args()
    connection = connection_from_args(args)
    client = GrpcClient(target, **connection.client_kwargs())

An API key is read from ``--api-key-file`` (default ``$TFS_API_KEY_FILE``) or
``--api-key`` (default ``$TFS_API_KEY``); a flag beats the environment, and
``--api-key`` is visible to other users in ``/proc/PID/cmdline``, so the file
or the environment is the way to pass it. One trailing line ending of a key
(as ``make certs`` writes it) is stripped; a key with other whitespace or
control characters is refused with a message that never shows the key.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from serving.client._security import credential

__all__ = ["Connection", "add_connection_arguments", "connection_from_args"]

API_KEY_ENV = "TFS_API_KEY"
API_KEY_FILE_ENV = "TFS_API_KEY_FILE"

_API_KEY_HELP = ("sent as x-api-key (default: $TFS_API_KEY). Visible to every user of this machine in "
                 "/proc/PID/cmdline and in shell history: prefer --api-key-file or $TFS_API_KEY")


def add_connection_arguments(parser_or_group: Union[argparse.ArgumentParser, "argparse._ArgumentGroup"]) -> None:
    """Add the group "TLS and credentials" to a parser (or these arguments to a group given)."""
    group = (parser_or_group.add_argument_group("TLS and credentials")
             if isinstance(parser_or_group, argparse.ArgumentParser) else parser_or_group)
    group.add_argument("--root-certificates", type=Path, metavar="FILE",
                       help="PEM of the CAs that may sign the server's certificate (default, once TLS is on: "
                            "the system's CAs)")
    group.add_argument("--client-certificate", "--client-cert", dest="client_certificate", type=Path,
                       metavar="FILE", help="PEM client certificate (mutual TLS); needs --client-key")
    group.add_argument("--client-key", type=Path, metavar="FILE", help="PEM private key of --client-certificate")
    group.add_argument("--server-name", metavar="NAME",
                       help="the name the server's certificate carries, if not the host dialled")
    keys = group.add_mutually_exclusive_group()
    keys.add_argument("--api-key-file", type=Path, metavar="FILE",
                      help="file holding the API key, sent as x-api-key (default: $TFS_API_KEY_FILE); "
                           "one trailing line ending is stripped")
    keys.add_argument("--api-key", metavar="KEY", help=_API_KEY_HELP)
    group.add_argument("--bearer-token", metavar="TOKEN",
                       help="sent as authorization: Bearer TOKEN (visible in /proc like --api-key)")
    group.add_argument("--insecure", action="store_true",
                       help="allow credentials over plaintext (an http:// URL, a gRPC port without TLS); "
                            "without it a credential turns TLS on, and plaintext is refused")


@dataclass(frozen=True, repr=False)
class Connection:
    """TLS and credentials of one server, as the SDK's clients take them.

    ``repr`` never shows the API key or the bearer token (``<set>`` stands for them).
    """

    root_certificates: Optional[Path] = None
    client_cert: Optional[Path] = None
    client_key: Optional[Path] = None
    server_name: Optional[str] = None
    api_key: Optional[str] = None
    bearer_token: Optional[str] = None
    insecure: bool = False

    @property
    def given(self) -> bool:
        """True when any TLS argument or credential is set (``insecure`` alone does not count)."""
        return any(getattr(self, f.name) for f in fields(self) if f.name != "insecure")

    def client_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``GrpcClient``, ``RestClient`` and their async twins."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __repr__(self) -> str:
        parts = (f"{f.name}=<set>" if f.name in _SECRETS and getattr(self, f.name) is not None
                 else f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return f"Connection({', '.join(parts)})"


_SECRETS = frozenset({"api_key", "bearer_token"})


def _read_key_file(path: Path, what: str) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"{what} {path}: cannot read it: {exc.strerror}") from None
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError(f"{what} {path}: the API key holds a non-ASCII character (a key is printable "
                         "ASCII without spaces)") from None


def connection_from_args(args: argparse.Namespace, environ: Optional[Mapping[str, str]] = None) -> Connection:
    """The ``Connection`` of parsed ``add_connection_arguments`` arguments (and the environment).

    The key comes from ``--api-key``, else ``--api-key-file``, else
    ``$TFS_API_KEY``, else ``$TFS_API_KEY_FILE``. ValueError, naming the
    source but never the key, for an unreadable file or a malformed key.
    """
    env = os.environ if environ is None else environ
    key, source = None, ""
    if getattr(args, "api_key", None):
        key, source = args.api_key, "--api-key"
    elif getattr(args, "api_key_file", None):
        key, source = _read_key_file(args.api_key_file, "--api-key-file"), f"--api-key-file {args.api_key_file}"
    elif env.get(API_KEY_ENV):
        key, source = env[API_KEY_ENV], f"${API_KEY_ENV}"
    elif env.get(API_KEY_FILE_ENV):
        path = Path(env[API_KEY_FILE_ENV])
        key, source = _read_key_file(path, f"${API_KEY_FILE_ENV}"), f"${API_KEY_FILE_ENV} {path}"
    return Connection(
        root_certificates=getattr(args, "root_certificates", None),
        client_cert=getattr(args, "client_certificate", None),
        client_key=getattr(args, "client_key", None),
        server_name=getattr(args, "server_name", None) or None,
        api_key=credential(key, f"the API key ({source})") if key is not None else None,
        bearer_token=credential(getattr(args, "bearer_token", None), "--bearer-token"),
        insecure=bool(getattr(args, "insecure", False)))
