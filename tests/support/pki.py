"""Certificates for TLS tests, made by ``gateway.certs`` (``make certs``) into a test's directory.

``make_pki(directory)`` writes a private CA with a server certificate
(``localhost`` and ``127.0.0.1``, serverAuth) and a client certificate
(clientAuth), and a second, untrusted "rogue" CA with its own server and
client certificates: two ``init_secrets`` folders, ``trusted/`` and ``rogue/``.
None are committed.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gateway.certs import Credentials, init_secrets

__all__ = ["Pki", "make_pki", "ssl_config_text"]

_ROGUE = "rogue-"


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files ``make_pki`` wrote: ``ca``, ``server``, ``client`` and their ``rogue-`` twins."""

    directory: Path

    def _folder(self, name: str) -> tuple[Credentials, str]:
        if name.startswith(_ROGUE):
            return Credentials(self.directory / "rogue"), name[len(_ROGUE):]
        return Credentials(self.directory / "trusted"), name

    def cert(self, name: str) -> Path:
        creds, name = self._folder(name)
        return creds.cert(name)

    def key(self, name: str) -> Path:
        creds, name = self._folder(name)
        return creds.private_key(name)

    @property
    def ca(self) -> Path:
        return self.cert("ca")

    @property
    def rogue_ca(self) -> Path:
        return self.cert("rogue-ca")


def make_pki(directory: Path) -> Pki:
    """Write the CA, server, client and rogue certificates into ``directory``."""
    for folder in ("trusted", "rogue"):
        init_secrets(directory / folder)
    return Pki(directory)


def _quoted(path: Path) -> str:
    return '"' + path.read_text().replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def ssl_config_text(pki: Pki, *, client_verify: bool = False, server: str = "server") -> str:
    """TF Serving's ``SSLConfig`` text proto with the PEMs inline (as ``--ssl_config_file`` wants them)."""
    return (f"server_key: {_quoted(pki.key(server))}\nserver_cert: {_quoted(pki.cert(server))}\n"
            f"custom_ca: {_quoted(pki.ca)}\nclient_verify: {'true' if client_verify else 'false'}\n")
