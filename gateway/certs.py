"""``make certs``: a local CA, the gateway's certificates and API keys (``openssl`` CLI).

``python -m gateway.certs [--out gateway/secrets] [--server-name HOST]...`` writes:

- ``ca.crt`` / ``ca.key``: a local CA (EC P-256). ``ca.key`` never leaves this
  folder; the gateway gets ``ca.crt`` only (to verify client certificates).
- ``server.crt`` / ``server.key``: the gateway's certificate for ``localhost``,
  ``gateway``, ``127.0.0.1`` and each ``--server-name``.
- ``client.crt`` / ``client.key`` and ``admin.crt`` / ``admin.key``: client
  certificates for the gateway's mTLS port, subject ``O=tfs-stack, OU=<role>,
  CN=<name>``; the role is ``client`` or ``admin``.
- ``client.api-key`` / ``admin.api-key``: random API keys (64 hex digits),
  and ``api-keys.map``, the nginx ``map`` lines the gateway reads:
  ``<key> <role>:<name>;``.

``python -m gateway.certs issue NAME [--admin]`` adds a client (certificate and
API key) signed by the existing CA. Existing files are never overwritten unless
``--force``. Private keys and API keys are mode 0600: compose runs the gateway
as ``HOST_UID`` so it can read them.
"""
from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

__all__ = ["DEFAULT_DIR", "DEFAULT_SERVER_NAMES", "ROLES", "Credentials", "CertsError",
           "init_secrets", "issue_client", "build_parser", "main"]

DEFAULT_DIR = Path(__file__).resolve().parent / "secrets"
# The compose service name, and what a client on the host dials.
DEFAULT_SERVER_NAMES = ("localhost", "gateway", "127.0.0.1")
ROLES = ("client", "admin")
ORGANIZATION = "tfs-stack"
CA_DAYS, LEAF_DAYS = 3650, 825

_EXTENSIONS = """\
[ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = {san}
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""
_REQ_CONFIG = "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\n"


class CertsError(RuntimeError):
    """openssl failed, or the files exist and ``force`` was not given."""


@dataclass(frozen=True)
class Credentials:
    """The files of one secrets folder: ``cert("server")``, ``private_key("client")``, ``api_key("admin")``..."""

    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    @property
    def ca_cert(self) -> Path:
        return self.path("ca.crt")

    @property
    def key_map(self) -> Path:
        return self.path("api-keys.map")

    def cert(self, name: str) -> Path:
        return self.path(f"{name}.crt")

    def private_key(self, name: str) -> Path:
        return self.path(f"{name}.key")

    def api_key(self, name: str) -> str:
        return self.path(f"{name}.api-key").read_text().strip()


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise CertsError(f"openssl {args[0]} failed: {proc.stderr.strip()}")


def _private(path: Path) -> None:
    os.chmod(path, 0o600)


def _subject(role: str, name: str) -> str:
    return f"O = {ORGANIZATION}\nOU = {role}\nCN = {name}\n"


def _san(names: Sequence[str]) -> str:
    def entry(name: str) -> str:
        return f"IP:{name}" if name.replace(".", "").isdigit() or ":" in name else f"DNS:{name}"
    return ", ".join(entry(n) for n in dict.fromkeys(names))


def _sign(creds: Credentials, work: Path, name: str, role: str, section: str, extensions: str,
          common_name: Optional[str] = None) -> None:
    """A new EC key ``<name>.key`` and ``<name>.crt`` signed by the CA with ``section``'s extensions."""
    config = work / f"{name}.req.cnf"
    config.write_text(_REQ_CONFIG + _subject(role, common_name or name))
    ext = work / "ext.cnf"
    ext.write_text(extensions)
    csr = work / f"{name}.csr"
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-config", str(config), "-keyout", str(creds.private_key(name)), "-out", str(csr))
    _private(creds.private_key(name))
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(creds.ca_cert), "-CAkey", str(creds.private_key("ca")),
             "-set_serial", f"0x{secrets.token_hex(16)}", "-days", str(LEAF_DAYS), "-sha256",
             "-extfile", str(ext), "-extensions", section, "-out", str(creds.cert(name)))


def _make_ca(creds: Credentials, work: Path) -> None:
    config = work / "ca.req.cnf"
    config.write_text(_REQ_CONFIG + f"O = {ORGANIZATION}\nCN = {ORGANIZATION} local CA\n"
                      + "\n" + _EXTENSIONS.format(san="DNS:unused"))
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-config", str(config), "-extensions", "ca", "-days", str(CA_DAYS), "-sha256",
             "-keyout", str(creds.private_key("ca")), "-out", str(creds.ca_cert))
    _private(creds.private_key("ca"))


def _add_api_key(creds: Credentials, name: str, role: str) -> str:
    key = secrets.token_hex(32)
    key_file = creds.path(f"{name}.api-key")
    key_file.write_text(key + "\n")
    _private(key_file)
    with open(creds.key_map, "a") as lines:
        lines.write(f"{key} {role}:{name};\n")
    _private(creds.key_map)
    return key


def issue_client(directory: Path, name: str, role: str = "client", *, force: bool = False) -> Credentials:
    """A client certificate and API key for ``name`` (``role`` client or admin), signed by the folder's CA."""
    if role not in ROLES:
        raise CertsError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    if not name or not all(c.isalnum() or c in "-_." for c in name):
        raise CertsError(f"a client name is letters, digits, '-', '_' and '.', not {name!r}")
    creds = Credentials(Path(directory))
    if not creds.private_key("ca").is_file():
        raise CertsError(f"no CA in {creds.directory}: run `make certs` first")
    if creds.cert(name).exists() and not force:
        raise CertsError(f"{creds.cert(name)} exists (pass --force to replace it)")
    with tempfile.TemporaryDirectory() as tmp:
        _sign(creds, Path(tmp), name, role, "client", _EXTENSIONS.format(san="DNS:unused"))
    _add_api_key(creds, name, role)
    return creds


def init_secrets(directory: Path = DEFAULT_DIR, *, server_names: Sequence[str] = (),
                 force: bool = False) -> Credentials:
    """A new CA, server certificate, ``client`` and ``admin`` credentials in ``directory``."""
    creds = Credentials(Path(directory))
    if creds.ca_cert.exists() and not force:
        raise CertsError(f"{creds.directory} already has a CA (pass --force to make everything anew; "
                         "`issue NAME` adds a client)")
    creds.directory.mkdir(parents=True, exist_ok=True)
    os.chmod(creds.directory, 0o700)
    for stale in creds.directory.glob("*"):
        if stale.suffix in (".crt", ".key", ".api-key", ".map"):
            stale.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _make_ca(creds, work)
        san = _san([*DEFAULT_SERVER_NAMES, *server_names])
        _sign(creds, work, "server", "server", "server", _EXTENSIONS.format(san=san), common_name="gateway")
        for role in ROLES:
            _sign(creds, work, role, role, "client", _EXTENSIONS.format(san="DNS:unused"))
    for role in ROLES:
        _add_api_key(creds, role, role)
    return creds


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gateway.certs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR, metavar="DIR",
                        help=f"the secrets folder (default: {DEFAULT_DIR})")
    parser.add_argument("--force", action="store_true", help="replace existing files")
    sub = parser.add_subparsers(dest="command")
    init = sub.add_parser("init", help="a new CA, server, client and admin credentials (the default)")
    init.add_argument("--server-name", action="append", default=[], metavar="HOST",
                      help="another DNS name or IP address for the server certificate (repeatable)")
    issue = sub.add_parser("issue", help="a certificate and API key for another client")
    issue.add_argument("name")
    issue.add_argument("--admin", action="store_true", help="an admin credential (may reload the model config)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "issue":
            creds = issue_client(args.out, args.name, "admin" if args.admin else "client", force=args.force)
            print(f"issued {creds.cert(args.name)}, {creds.private_key(args.name)}, "
                  f"{creds.path(args.name + '.api-key')}; reload the gateway: docker compose kill -s HUP gateway")
            return 0
        creds = init_secrets(args.out, server_names=getattr(args, "server_name", []), force=args.force)
    except CertsError as error:
        print(f"gateway.certs: {error}", file=sys.stderr)
        return 1
    print(f"wrote a local CA, server, client and admin credentials into {creds.directory}\n"
          f"  CA for clients:  {creds.ca_cert}\n"
          f"  client API key:  {creds.path('client.api-key')} (admin: {creds.path('admin.api-key')})\n"
          f"  mTLS:            {creds.cert('client')} + {creds.private_key('client')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
