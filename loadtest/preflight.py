"""What a load command checks before it runs, so that a mistake costs one line, not a whole run.

- :func:`check_served`: one metadata call (``GetModelMetadata`` over gRPC,
  ``GET /v1/models/NAME[/versions/N|/labels/L]/metadata`` over REST) to the
  address the load will go to. It stops the command (``UsageError``, exit 2)
  when nothing answers there, when the port speaks TLS and the load was given
  no CA (the gateway's ports: a ClientHello is answered by a TLS record, a
  handshake 0x16 or an alert 0x15), when the port speaks the other API
  (``--grpc`` at a REST port, ``--rest`` at a gRPC port), or when the model,
  version, label or signature is not served.
- :func:`check_level_time`: a sweep's ``--max-level-time`` must hold the
  warmup and the stable windows a level needs, or no level can be stable.
- :func:`stack_metrics_url`: the Prometheus page of the stack ``make up``
  started (its ``stack.json``), the default ``--metrics-url`` of a sweep of
  that stack's server.
"""
from __future__ import annotations

import http.client
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

from loadtest.options import UsageError
from loadtest.payloads import Target
from serving.client import NO_RETRY, Connection, GrpcClient, RestClient, ServingError
from serving.client.errors import TlsError
from serving.config.served_config import DEFAULT_WORK_DIR, STATE_FILE, read_state
from serving.launcher import MONITORING_PATH
from serving.status import Code

__all__ = ["PREFLIGHT_TIMEOUT_S", "check_served", "check_level_time", "speaks_tls", "stack_metrics_url"]

PREFLIGHT_TIMEOUT_S = 5.0


def _servable(target: Target) -> str:
    where = (f" version {target.version}" if target.version is not None
             else f" label {target.version_label!r}" if target.version_label else "")
    return f"model {target.name!r}{where}"


def check_served(protocol: str, address: str, target: Target, *, timeout: float = PREFLIGHT_TIMEOUT_S,
                 connection: Connection = Connection()) -> None:
    """One metadata call for ``target`` at ``address`` (``protocol`` grpc or rest) over ``connection``;
    ``UsageError`` naming the fault."""
    flag = f"--{protocol} {address}"
    kwargs = connection.client_kwargs()
    try:
        client = (GrpcClient(address, retry=NO_RETRY, timeout=timeout, **kwargs) if protocol == "grpc"
                  else RestClient(address, retry=NO_RETRY, timeout=timeout, **kwargs))
    except ValueError as error:  # a credential over plaintext without --insecure, an unreadable PEM
        raise UsageError(f"{flag}: {error}") from None
    try:
        with client:
            metadata = client.metadata(target.name, version=target.version, label=target.version_label)
    except TlsError as error:  # the handshake failed: its sentence says which side refused what
        raise UsageError(f"{flag}: {error.details}") from None
    except ServingError as error:
        tls = _tls_unconfigured(protocol, address, tls=bool(connection.root_certificates or connection.client_cert))
        if tls:  # nginx answers plain HTTP at a TLS port with a 400 page: not a model's fault
            raise UsageError(tls) from None
        if error.code in (Code.NOT_FOUND, Code.INVALID_ARGUMENT, Code.FAILED_PRECONDITION):
            raise UsageError(f"{flag}: {_servable(target)} is not served there: {error.details}") from None
        raise UsageError(_unreachable(protocol, address, error)) from None
    if target.signature_name not in metadata.signatures:
        known = ", ".join(k for k in metadata.signatures if not k.startswith("__"))
        raise UsageError(f"{flag}: {_servable(target)} has no signature {target.signature_name!r}; "
                         f"its signatures: {known}")


def _tls_unconfigured(protocol: str, address: str, tls: bool = False) -> Optional[str]:
    """The message for a plaintext call (``tls`` False, not an https:// URL) to a port that speaks TLS, else None."""
    if tls or address.startswith("https://") or not speaks_tls(_hostport(address)):
        return None
    return (f"--{protocol} {address}: this port speaks TLS: pass --root-certificates (make up's stack does this "
            "for you)" + ("; and give --rest an https:// URL" if protocol == "rest" else ""))


def _unreachable(protocol: str, address: str, error: ServingError) -> str:
    """Why a metadata call did not reach a server: the other API on that port, or nothing at all."""
    flag = f"--{protocol} {address}"
    if protocol == "grpc" and _answers_http(address):
        return (f"{flag}: this port answers HTTP/1.1 (a REST port), not gRPC; load it with --rest "
                f"http://{address}, or give --grpc the server's gRPC port")
    hostport = address.split("://", 1)[-1].split("/", 1)[0]
    if protocol == "rest" and _answers_grpc(hostport):
        return (f"{flag}: this port answers gRPC, not REST; load it with --grpc {hostport}, or give --rest "
                "the server's REST URL")
    return f"{flag}: no server answers there ({error.code.name}: {error.details})"


def _hostport(address: str) -> str:
    return address.split("://", 1)[-1].split("/", 1)[0]


def speaks_tls(hostport: str, timeout: float = 2.0) -> bool:
    """True when ``HOST:PORT`` answers a TLS ClientHello with a TLS record (a handshake or an alert).

    Only the first bytes of the answer are read: content type 0x16 (handshake: a ServerHello) or 0x15
    (alert), then protocol major version 3. A plaintext HTTP/1.1 or HTTP/2 server answers otherwise, or
    closes.
    """
    host, _, port = hostport.rpartition(":")
    try:
        hello = _client_hello(host.strip("[]"))
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
            sock.sendall(hello)
            head = sock.recv(2)
    except (OSError, ValueError):
        return False
    return len(head) == 2 and head[0] in (0x15, 0x16) and head[1] == 0x03


def _client_hello(server_name: str) -> bytes:
    """The bytes of a TLS ClientHello (from the ssl module, into memory: nothing is sent here)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name or None)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def _answers_http(hostport: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{hostport}/v1/models", timeout=2.0):
            return True
    except urllib.error.HTTPError:  # an HTTP status: an HTTP server
        return True
    except (OSError, ValueError, http.client.HTTPException):  # nothing, or not HTTP/1.1 (a gRPC port's HTTP/2)
        return False


def _answers_grpc(hostport: str) -> bool:
    try:
        with GrpcClient(hostport, retry=NO_RETRY, timeout=2.0) as client:
            client.status("_")
    except ServingError as error:
        return error.code not in (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED, Code.UNKNOWN, Code.INTERNAL)
    except ValueError:
        return False
    return True


def check_level_time(*, window_s: float, stable_windows: int, warmup_s: float, max_level_s: float) -> None:
    """``UsageError`` when ``max_level_s`` cannot hold the warmup and ``stable_windows`` windows of ``window_s``."""
    needed = warmup_s + stable_windows * window_s
    if max_level_s < needed:
        raise UsageError(f"--max-level-time {max_level_s:g} s cannot hold {stable_windows} stable windows of "
                         f"{window_s:g} s after a warmup of {warmup_s:g} s: needs at least {needed:g} s "
                         "(raise --max-level-time, or lower --window, --stable-windows or --warmup)")


def stack_metrics_url(grpc: Optional[str], rest: Optional[str],
                      work_dir: Path = DEFAULT_WORK_DIR) -> Optional[str]:
    """The Prometheus page of ``make up``'s stack when ``grpc`` or ``rest`` is its address, else None."""
    state = read_state(Path(work_dir) / STATE_FILE)
    if state is None or not ((grpc and grpc == state.grpc) or (rest and rest == state.rest.rstrip("/"))):
        return None
    return state.rest.rstrip("/") + MONITORING_PATH
