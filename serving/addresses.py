"""Server addresses on every command line: ``--grpc HOST:PORT`` and ``--rest URL``, parsed by one rule.

- ``--grpc`` takes ``HOST:PORT`` (``[::1]:8500`` for IPv6) or
  ``grpc://HOST:PORT`` (the scheme is dropped), or one of gRPC's own target
  forms (``dns:///HOST:PORT``, ``unix:///path``, ...), passed on unchanged.
  The port is required: a number from 1 to 65535.
- ``--rest`` takes an ``http://`` or ``https://`` URL (the port may be left
  to the scheme's default; a trailing slash is dropped). A URL without a
  scheme is refused: ``HOST:PORT`` alone could mean either API.

An address whose scheme belongs to the other API (``--grpc http://...``,
``--rest grpc://...``) is refused naming the flag that takes it. The
functions are argparse ``type=`` callables: :class:`AddressError` is an
``argparse.ArgumentTypeError`` (argparse prints its message as it is) and a
``ValueError`` for callers outside argparse. The message names the address,
never the flag (argparse prefixes ``argument --grpc:``).
"""
from __future__ import annotations

import argparse
import urllib.parse

__all__ = ["AddressError", "grpc_address", "rest_address", "server_address", "GRPC_FORM", "REST_FORM"]

GRPC_FORM = "HOST:PORT (or grpc://HOST:PORT), e.g. 127.0.0.1:8500"
REST_FORM = "an http:// or https:// URL, e.g. http://127.0.0.1:8501"
_REST_SCHEMES = ("http", "https")
# gRPC's own name-resolver schemes (grpc/doc/naming.md): the channel resolves them itself.
_GRPC_TARGET_SCHEMES = ("dns", "unix", "unix-abstract", "ipv4", "ipv6", "vsock", "xds")


class AddressError(argparse.ArgumentTypeError, ValueError):
    """An address that breaks the rule of its flag; the message names the address and the rule."""


def _scheme(address: str) -> str:
    return address.split("://", 1)[0].lower() if "://" in address else ""


def _non_empty(address: str, flag: str, form: str) -> str:
    text = address.strip()
    if not text:
        raise AddressError(f"an empty address; {flag} takes {form}")
    return text


def _port_problem(port: str) -> str:
    """Why ``port`` is not a TCP port, or '' when it is one."""
    if not port:
        return "has no port"
    if not port.isdigit() or not 0 < int(port) < 65536:
        return f"has an invalid port {port!r} (a number from 1 to 65535)"
    return ""


def grpc_address(address: str) -> str:
    """``address`` as a gRPC target: ``HOST:PORT`` (or a gRPC target form, unchanged); else AddressError."""
    text = _non_empty(address, "--grpc", GRPC_FORM)
    scheme = _scheme(text)
    if scheme in _REST_SCHEMES:
        raise AddressError(f"{address} is a REST URL ({scheme}://), not a gRPC address; give it to --rest, "
                           f"or give --grpc {GRPC_FORM}")
    if scheme in _GRPC_TARGET_SCHEMES or (not scheme and text.split(":", 1)[0] in ("unix", "unix-abstract")):
        return text
    if scheme and scheme != "grpc":
        raise AddressError(f"{address} has an unknown scheme {scheme}://; --grpc takes {GRPC_FORM}")
    hostport = text[len("grpc://"):] if scheme else text
    host, colon, port = hostport.rpartition(":")
    if not colon or host.endswith(":") and not host.startswith("["):  # no port, or a bare IPv6 address
        host, port = hostport, ""
    problem = "has no host" if not host else _port_problem(port)
    if problem:
        raise AddressError(f"{address} {problem}; --grpc takes {GRPC_FORM}")
    return f"{host}:{port}"


def rest_address(address: str) -> str:
    """``address`` as a REST base URL, without a trailing slash; else AddressError."""
    text = _non_empty(address, "--rest", REST_FORM)
    scheme = _scheme(text)
    if scheme == "grpc":
        raise AddressError(f"{address} is a gRPC address (grpc://), not a REST URL; give it to --grpc, "
                           f"or give --rest {REST_FORM}")
    if not scheme:
        raise AddressError(f"{address} has no scheme; --rest takes {REST_FORM}")
    if scheme not in _REST_SCHEMES:
        raise AddressError(f"{address} has an unknown scheme {scheme}://; --rest takes {REST_FORM}")
    parts = urllib.parse.urlsplit(text)
    netloc = parts.netloc.rpartition("@")[2]
    port = netloc.rpartition(":")[2] if ":" in netloc.rpartition("]")[2] else None
    problem = "has no host" if not parts.hostname else (_port_problem(port) if port is not None else "")
    if problem:
        raise AddressError(f"{address} {problem}; --rest takes {REST_FORM}")
    return text.rstrip("/")


def server_address(protocol: str, address: str) -> str:
    """``grpc_address`` or ``rest_address`` by ``protocol`` (``grpc`` or ``rest``)."""
    if protocol not in ("grpc", "rest"):
        raise ValueError(f"protocol must be grpc or rest, got {protocol!r}")
    return grpc_address(address) if protocol == "grpc" else rest_address(address)
