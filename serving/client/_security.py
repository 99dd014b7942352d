"""TLS and credentials, the same arguments for all four clients.

- ``root_certificates``: PEM of the CAs that may sign the server's certificate.
  Given, only these CAs are trusted; None trusts the system's (gRPC's bundled
  roots, httpx's default context for REST).
- ``client_cert`` / ``client_key``: the client's certificate chain and private
  key, for servers that require mutual TLS (TF Serving's ``client_verify``).
  Both or neither.
- ``server_name``: the name the server's certificate must carry when it
  differs from the host the client dials (gRPC ``grpc.ssl_target_name_override``;
  REST the TLS SNI name and hostname check).
- ``api_key`` is sent as ``x-api-key: <key>`` and ``bearer_token`` as
  ``authorization: Bearer <token>``, on every call (gRPC metadata or HTTP
  headers), as the gateway expects.

PEM values are bytes, PEM text, or the path of a PEM file. A failed TLS
handshake becomes ``TlsError`` (never retried), with a sentence saying which
side refused what; the transport's own message follows it.
"""
from __future__ import annotations

import os
import re
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Optional, Sequence, Union

import grpc

from serving.client.errors import TlsError

__all__ = ["PemSource", "TlsConfig", "auth_metadata", "credential", "grpc_tls_error", "http_tls_error",
           "http_status_tls_error", "plaintext_refusal", "redact"]

PemSource = Union[bytes, str, os.PathLike[str]]
"""PEM bytes, PEM text, or the path of a PEM file."""

API_KEY_HEADER = "x-api-key"
AUTHORIZATION_HEADER = "authorization"
_PEM_MARK = b"-----BEGIN "


def read_pem(value: PemSource, argument: str) -> bytes:
    """The PEM bytes of ``value``; ValueError naming ``argument`` when it is not PEM."""
    if isinstance(value, bytes):
        data = value
    elif isinstance(value, str) and value.lstrip().startswith(_PEM_MARK.decode()):
        data = value.encode()
    else:
        try:
            data = Path(value).read_bytes()
        except OSError as exc:
            raise ValueError(f"{argument}: cannot read {value}: {exc.strerror}") from exc
    if _PEM_MARK not in data:
        raise ValueError(f"{argument} is not PEM (no '-----BEGIN' line)")
    return data


@dataclass(frozen=True)
class TlsConfig:
    """The TLS arguments of one client, read and checked once at construction."""

    root_certificates: Optional[bytes] = None
    client_cert: Optional[bytes] = None
    client_key: Optional[bytes] = None
    server_name: Optional[str] = None

    @classmethod
    def from_args(cls, root_certificates: Optional[PemSource], client_cert: Optional[PemSource],
                  client_key: Optional[PemSource], server_name: Optional[str]) -> Optional["TlsConfig"]:
        """None when no TLS argument is given; ValueError for a lone half of the client pair."""
        if root_certificates is None and client_cert is None and client_key is None and not server_name:
            return None
        if (client_cert is None) != (client_key is None):
            raise ValueError("client_cert and client_key go together (mutual TLS needs both)")
        return cls(
            root_certificates=None if root_certificates is None else read_pem(root_certificates,
                                                                                "root_certificates"),
            client_cert=None if client_cert is None else read_pem(client_cert, "client_cert"),
            client_key=None if client_key is None else read_pem(client_key, "client_key"),
            server_name=server_name or None)

    def grpc_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(self.root_certificates, self.client_key, self.client_cert)

    def grpc_options(self) -> list[tuple[str, str]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []

    def ssl_context(self, httpx_module: ModuleType) -> ssl.SSLContext:
        """The REST client's context: httpx's default, or only ``root_certificates``; the client pair."""
        if self.root_certificates is None:
            context = httpx_module.create_ssl_context()
        else:
            context = ssl.create_default_context(cadata=self.root_certificates.decode("ascii", "replace"))
        if self.client_cert is not None:
            _load_client_pair(context, self.client_cert, self.client_key)
        return context

    def http_extensions(self) -> Optional[dict[str, str]]:
        """Per-request httpx extensions: the SNI name and hostname the certificate is checked against."""
        return {"sni_hostname": self.server_name} if self.server_name else None


def _load_client_pair(context: ssl.SSLContext, cert: bytes, key: Optional[bytes]) -> None:
    """``load_cert_chain`` reads files only: the PEMs go through a private temporary directory."""
    with tempfile.TemporaryDirectory(prefix="tfs-client-tls-") as directory:
        cert_path, key_path = Path(directory, "client.crt"), Path(directory, "client.key")
        cert_path.write_bytes(cert)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key or b"")
        try:
            context.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as exc:
            raise ValueError(f"client_cert / client_key are not a certificate and its private key: "
                             f"{exc.reason or exc}") from exc


_LINE_ENDINGS = ("\r\n", "\n", "\r")


def credential(value: Optional[str], what: str) -> Optional[str]:
    """``value`` (an API key or token) without one trailing line ending, as a key file holds it.

    A key is printable ASCII without whitespace (what an HTTP header and gRPC
    metadata carry); anything else is refused with a ValueError that names
    ``what`` and the offending position, never the key itself. None or ""
    stays None.
    """
    if value is None or value == "":
        return None
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    for ending in _LINE_ENDINGS:
        if value.endswith(ending):
            value = value[:-len(ending)]
            break
    if not value:
        raise ValueError(f"{what} is empty (only a line ending)")
    for position, char in enumerate(value):
        if not "!" <= char <= "~":
            kind = ("whitespace" if char.isspace() else
                    "a control character" if ord(char) < 0x20 or ord(char) == 0x7F else "a non-ASCII character")
            raise ValueError(f"{what} holds {kind} at position {position} of {len(value)} (a key is printable "
                             "ASCII without spaces; only one trailing line ending is stripped)")
    return value


def auth_metadata(api_key: Optional[str], bearer_token: Optional[str]) -> list[tuple[str, str]]:
    """``(name, value)`` pairs for the credentials given: gRPC metadata and HTTP headers alike.

    Each goes through ``credential`` (one trailing line ending stripped, other
    whitespace and control characters refused).
    """
    pairs = []
    api_key, bearer_token = credential(api_key, "api_key"), credential(bearer_token, "bearer_token")
    if api_key:
        pairs.append((API_KEY_HEADER, api_key))
    if bearer_token:
        pairs.append((AUTHORIZATION_HEADER, f"Bearer {bearer_token}"))
    return pairs


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret in ``secrets`` (and its repr-escaped form) replaced by ``<redacted>``."""
    for secret in secrets:
        if secret:
            for form in {secret, repr(secret)[1:-1], repr(secret.encode())[2:-1]}:
                if form:
                    text = text.replace(form, "<redacted>")
    return text


def plaintext_refusal(given: Sequence[str], where: str) -> str:
    """The message refusing to send credentials ``given`` (argument names) in plaintext to ``where``."""
    return (f"{' and '.join(given)} would be sent in plaintext to {where}: a credential needs TLS "
            "(an https:// URL, or gRPC with TLS; the system's CAs unless root_certificates= is given); "
            "pass insecure=True (CLI --insecure) to send it unencrypted anyway")


# What each OpenSSL / gRPC reason means, first match wins; the transport's text follows.
_REASONS = (
    (re.compile(r"Hostname mismatch|Hostname Verification|IP address mismatch|not in peer certificate"),
     "the server's certificate does not carry the name dialled; pass server_name= the name it carries"),
    (re.compile(r"CERTIFICATE_VERIFY_FAILED"),
     "the server's certificate is not trusted (not signed by root_certificates or, without them, "
     "a system CA)"),
    (re.compile(r"CERTIFICATE_REQUIRED|PEER_DID_NOT_RETURN_A_CERTIFICATE|No required SSL certificate"),
     "the server requires a client certificate (mutual TLS): pass client_cert= and client_key="),
    (re.compile(r"UNKNOWN_CA|BAD_CERTIFICATE|CERTIFICATE_UNKNOWN|UNSUPPORTED_CERTIFICATE|SSL certificate error"),
     "the server refused the client certificate (not signed by a CA the server trusts)"),
    (re.compile(r"HANDSHAKE_FAILURE"),
     "the server refused the handshake: it may require a client certificate (client_cert=, client_key=), "
     "or share no TLS version or cipher with the client"),
    (re.compile(r"WRONG_VERSION_NUMBER|HTTP_REQUEST|record layer failure"),
     "the server does not speak TLS on this port"),
    (re.compile(r"security handshaker|Invalid private key|Invalid cert"),
     "the client's TLS material is unusable (root_certificates, client_cert, client_key must be PEM, "
     "the key the certificate's)"),
    (re.compile(r"Socket closed|Connection reset"),
     "the server closed the connection during the TLS handshake: it requires a client certificate "
     "it trusts (client_cert=, client_key=), or does not speak TLS"),
)


def _tls_error(target: str, text: str) -> TlsError:
    reason = next((sentence for pattern, sentence in _REASONS if pattern.search(text)),
                  "the TLS handshake failed")
    return TlsError(f"TLS with {target} failed: {reason}. ({text})")


def grpc_tls_error(code: grpc.StatusCode, details: str, target: str) -> Optional[TlsError]:
    """``TlsError`` for a secure channel's failure to connect that is the handshake's, else None.

    gRPC reports every connection failure as UNAVAILABLE ``failed to connect
    to all addresses``; the handshake's carry its reason. A server that closes
    the socket mid-handshake is, on a TLS channel, one refusing the client's
    certificate or its absence (TLS 1.3 sends that alert after the client's
    side of the handshake is done).
    """
    if code != grpc.StatusCode.UNAVAILABLE or "failed to connect" not in details:
        return None
    if re.search(r"handshake|CERTIFICATE|Hostname Verification|Socket closed", details, re.IGNORECASE):
        return _tls_error(target, details)
    return None


# nginx refuses a missing or untrusted client certificate with an HTTP answer, not a TLS alert:
# 495 / 496, sent as 400 with these titles unless the gateway's config maps them.
_NGINX_CLIENT_CERTIFICATE = {495: "The SSL certificate error", 496: "No required SSL certificate was sent"}


def http_status_tls_error(status_code: int, body: bytes, url: str) -> Optional[TlsError]:
    """``TlsError`` for a TLS gateway's answer that refuses the client certificate, else None."""
    text = body.decode("utf-8", "replace")
    for code, title in _NGINX_CLIENT_CERTIFICATE.items():
        if status_code == code or (status_code == 400 and title in text):
            return _tls_error(url, f"HTTP {status_code}: {title}")
    return None


def http_tls_error(exc: BaseException, url: str) -> Optional[TlsError]:
    """``TlsError`` when an ``ssl.SSLError`` caused the httpx failure ``exc``, else None."""
    chain: list[BaseException] = []
    link: Optional[BaseException] = exc
    while link is not None and link not in chain:
        if isinstance(link, ssl.SSLError):
            return _tls_error(url, str(link))
        chain.append(link)
        link = link.__cause__ or link.__context__
    return None
