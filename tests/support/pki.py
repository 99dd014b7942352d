"""Certificates for TLS tests, made with the ``openssl`` CLI into a test's directory (none are committed).

``make_pki(directory)`` writes a private CA, a server certificate it signs
(``localhost`` and ``127.0.0.1``, serverAuth), a client certificate it signs
(clientAuth), and a second, untrusted "rogue" CA with its own server and
client certificates. Keys are P-256 EC keys; certificates last two days.
"""
from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Pki", "make_pki", "ssl_config_text"]

_SUBJECT_PREFIX = "/O=tfs-stack tests/CN="


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files ``make_pki`` wrote."""

    directory: Path

    def cert(self, name: str) -> Path:
        return self.directory / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.directory / f"{name}.key"

    @property
    def ca(self) -> Path:
        return self.cert("ca")

    @property
    def rogue_ca(self) -> Path:
        return self.cert("rogue-ca")


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _new_ca(pki: Pki, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-days", "2", "-subj", _SUBJECT_PREFIX + name, "-keyout", str(pki.key(name)), "-out", str(pki.cert(name)),
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")


def _new_leaf(pki: Pki, name: str, ca: str, names: str, usage: str) -> None:
    csr, extensions = pki.directory / f"{name}.csr", pki.directory / f"{name}.ext"
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-subj", _SUBJECT_PREFIX + name, "-keyout", str(pki.key(name)), "-out", str(csr))
    extensions.write_text(f"subjectAltName={names}\nextendedKeyUsage={usage}\nbasicConstraints=CA:FALSE\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(pki.cert(ca)), "-CAkey", str(pki.key(ca)),
             "-set_serial", f"0x{secrets.token_hex(8)}", "-days", "2", "-extfile", str(extensions),
             "-out", str(pki.cert(name)))


def make_pki(directory: Path) -> Pki:
    """Write the CA, server, client and rogue certificates into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)
    for ca in ("ca", "rogue-ca"):
        _new_ca(pki, ca)
    _new_leaf(pki, "server", "ca", "DNS:localhost,IP:127.0.0.1", "serverAuth")
    _new_leaf(pki, "client", "ca", "DNS:client.test", "clientAuth")
    _new_leaf(pki, "rogue-server", "rogue-ca", "DNS:localhost,IP:127.0.0.1", "serverAuth")
    _new_leaf(pki, "rogue-client", "rogue-ca", "DNS:client.test", "clientAuth")
    return pki


def _quoted(path: Path) -> str:
    return '"' + path.read_text().replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def ssl_config_text(pki: Pki, *, client_verify: bool = False, server: str = "server") -> str:
    """TF Serving's ``SSLConfig`` text proto with the PEMs inline (as ``--ssl_config_file`` wants them)."""
    return (f"server_key: {_quoted(pki.key(server))}\nserver_cert: {_quoted(pki.cert(server))}\n"
            f"custom_ca: {_quoted(pki.ca)}\nclient_verify: {'true' if client_verify else 'false'}\n")
