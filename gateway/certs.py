"""``make certs``: a local CA, the gateway's certificates and API keys (``openssl`` CLI).

``python -m gateway.certs [--out gateway/secrets] [init] [--server-name HOST]...`` writes:

- ``ca.crt`` / ``ca.key``: a local CA (EC P-256). ``ca.key`` never leaves this
  folder; the gateway gets ``ca.crt`` only (to verify client certificates).
- ``server.crt`` / ``server.key``: the gateway's certificate for ``localhost``,
  ``gateway``, ``127.0.0.1`` and each ``--server-name``.
- one credential for each of :data:`DEFAULT_CLIENTS`: ``client``, ``admin`` and
  ``loadtest`` (its own, higher rate and concurrency limits at the gateway, never
  admin): ``<name>.crt`` / ``<name>.key`` for the gateway's mTLS port (subject
  ``O=tfs-stack, OU=<role>, CN=<name>``) and ``<name>.api-key`` (64 hex digits).
- ``access/``: what the gateway reads to decide who may enter, re-read at each
  reload: ``api-keys.map`` (nginx ``map`` lines ``<key> <role>:<name>;``) and
  ``revoked-serials.map`` (``<serial> 1;``: certificates refused on the mTLS port).

``init`` on a folder that has a CA adds only what is missing (a default client,
the ``access/`` files) and touches nothing else; ``--force init`` makes everything
anew. ``issue NAME [--role ROLE]`` adds a client; ``rotate NAME`` replaces its key
and certificate (the old key leaves the map, the old certificate is revoked);
``revoke NAME`` removes it. ``--force issue`` of an existing name is ``rotate``.

Every change of ``access/`` holds one lock (``.access.lock``, ``flock``) from the read
to the atomic rename of each file, so two operators at once lose nothing. A folder
mounted whole (compose mounts ``access/``) sees the renamed files; a single-file bind
mount would keep the old file. Private keys and API keys are mode 0600: compose runs
the gateway as ``HOST_UID`` so it can read them.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import re
import secrets
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

__all__ = ["DEFAULT_DIR", "DEFAULT_SERVER_NAMES", "ROLES", "DEFAULT_CLIENTS", "ACCESS_DIR", "GRAFANA_PASSWORD_FILE",
           "Credentials", "CertsError", "init_secrets", "issue_client", "rotate_client", "revoke_client",
           "edit_key_map", "write_grafana_password", "build_parser", "main"]

DEFAULT_DIR = Path(__file__).resolve().parent / "secrets"
# The compose service name, and what a client on the host dials.
DEFAULT_SERVER_NAMES = ("localhost", "gateway", "127.0.0.1")
# What a credential may do at the gateway: `client` inference and status; `admin` everything
# (HandleReloadConfigRequest, metrics); `loadtest` what `client` may, under GATEWAY_LOADTEST_RATE and
# GATEWAY_LOADTEST_CONN instead of GATEWAY_RATE and GATEWAY_CONN_PER_IP, so load tests and canary
# analysis measure the server and not the limiter.
ROLES = ("client", "admin", "loadtest")
# The credentials `make certs` issues: name -> role.
DEFAULT_CLIENTS = {"client": "client", "admin": "admin", "loadtest": "loadtest"}
# The folder of the files the gateway's admission reads (compose mounts it whole, read-only).
ACCESS_DIR = "access"
RESERVED_NAMES = ("ca", "server")
# Grafana's admin password, a compose secret file (GF_SECURITY_ADMIN_PASSWORD__FILE): never in an environment.
GRAFANA_PASSWORD_FILE = "grafana-admin-password"
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
_KEY_LINE = re.compile(r"^\s*(?P<key>\S+)\s+(?P<role>[a-z]+):(?P<name>[^;\s]+)\s*;")
_REVOKED_LINE = re.compile(r"^\s*(?P<serial>[0-9A-Fa-f]+)\s+1\s*;")
RELOAD_HINT = ("the gateway re-reads access/ by itself within a few seconds (compose); "
               "a gateway of your own: nginx -s reload")


class CertsError(RuntimeError):
    """openssl failed, a name is invalid or unknown, or the files exist and ``force`` was not given."""


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
    def access_dir(self) -> Path:
        return self.path(ACCESS_DIR)

    @property
    def key_map(self) -> Path:
        return self.access_dir / "api-keys.map"

    @property
    def revoked_map(self) -> Path:
        return self.access_dir / "revoked-serials.map"

    @property
    def lock_file(self) -> Path:
        return self.path(".access.lock")

    def cert(self, name: str) -> Path:
        return self.path(f"{name}.crt")

    def private_key(self, name: str) -> Path:
        return self.path(f"{name}.key")

    def api_key_file(self, name: str) -> Path:
        return self.path(f"{name}.api-key")

    def api_key(self, name: str) -> str:
        return self.api_key_file(name).read_text().strip()


def _openssl(*args: str) -> str:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise CertsError(f"openssl {args[0]} failed: {proc.stderr.strip()}")
    return proc.stdout


def _private(path: Path) -> None:
    os.chmod(path, 0o600)


def _subject(role: str, name: str) -> str:
    return f"O = {ORGANIZATION}\nOU = {role}\nCN = {name}\n"


def _san(names: Sequence[str]) -> str:
    def entry(name: str) -> str:
        return f"IP:{name}" if name.replace(".", "").isdigit() or ":" in name else f"DNS:{name}"
    return ", ".join(entry(n) for n in dict.fromkeys(names))


def _sign(creds: Credentials, work: Path, name: str, role: str, section: str, extensions: str,
          common_name: Optional[str] = None, out: Optional[Path] = None) -> tuple[Path, Path]:
    """A new EC key and certificate signed by the CA with ``section``'s extensions: (crt, key) in ``out``."""
    out = out or creds.directory
    config = work / f"{name}.req.cnf"
    config.write_text(_REQ_CONFIG + _subject(role, common_name or name))
    ext = work / "ext.cnf"
    ext.write_text(extensions)
    csr = work / f"{name}.csr"
    crt, key = out / f"{name}.crt", out / f"{name}.key"
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-config", str(config), "-keyout", str(key), "-out", str(csr))
    _private(key)
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(creds.ca_cert), "-CAkey", str(creds.private_key("ca")),
             "-set_serial", f"0x{secrets.token_hex(16)}", "-days", str(LEAF_DAYS), "-sha256",
             "-extfile", str(ext), "-extensions", section, "-out", str(crt))
    return crt, key


def _make_ca(creds: Credentials, work: Path) -> None:
    config = work / "ca.req.cnf"
    config.write_text(_REQ_CONFIG + f"O = {ORGANIZATION}\nCN = {ORGANIZATION} local CA\n"
                      + "\n" + _EXTENSIONS.format(san="DNS:unused"))
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-config", str(config), "-extensions", "ca", "-days", str(CA_DAYS), "-sha256",
             "-keyout", str(creds.private_key("ca")), "-out", str(creds.ca_cert))
    _private(creds.private_key("ca"))


def certificate_serial(cert: Path) -> str:
    """The serial number of ``cert`` as nginx's ``$ssl_client_serial`` spells it (upper-case hex)."""
    return _openssl("x509", "-noout", "-serial", "-in", str(cert)).strip().partition("=")[2].upper()


# --- access/: the files the gateway reads, changed under one lock, each replaced atomically ----------------

@contextlib.contextmanager
def _access_lock(creds: Credentials) -> Iterator[None]:
    """Holds ``.access.lock`` (``flock``, exclusive) of the folder: one change of access/ at a time."""
    fd = os.open(creds.lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _replace_file(path: Path, text: str) -> None:
    """``path`` holds ``text``: written beside it, synced, then renamed over it (readers see old or new)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o600)
        if os.geteuid() == 0:  # root (make up as root chowns the folder to the gateway's user): keep its owner
            owner = path.parent.stat()
            os.chown(tmp, owner.st_uid, owner.st_gid)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True) if path.is_file() else []


def _rewrite_key_map(creds: Credentials, edit: Callable[[list[str]], list[str]]) -> None:
    """The map's lines through ``edit``; the caller holds the lock."""
    _replace_file(creds.key_map, "".join(edit(_read_lines(creds.key_map))))


def edit_key_map(directory: Path, edit: Callable[[list[str]], list[str]]) -> None:
    """Replace ``api-keys.map``'s lines with ``edit(lines)``, under the folder's lock (an operator's own edit)."""
    creds = Credentials(Path(directory))
    with _access_lock(creds):
        _rewrite_key_map(creds, edit)


def _without(name: str) -> Callable[[list[str]], list[str]]:
    def edit(lines: list[str]) -> list[str]:
        return [line for line in lines if not ((m := _KEY_LINE.match(line)) and m["name"] == name)]
    return edit


def _key_roles(creds: Credentials, name: str) -> list[str]:
    return [m["role"] for line in _read_lines(creds.key_map) if (m := _KEY_LINE.match(line)) and m["name"] == name]


def _revoke_serial(creds: Credentials, cert: Path, name: str) -> None:
    """Adds ``cert``'s serial to revoked-serials.map (the caller holds the lock)."""
    if not cert.is_file():
        return
    serial = certificate_serial(cert)
    lines = _read_lines(creds.revoked_map)
    if any((m := _REVOKED_LINE.match(line)) and m["serial"].upper() == serial for line in lines):
        return
    when = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    _replace_file(creds.revoked_map, "".join(lines) + f"{serial} 1;  # {name}, revoked {when}\n")


def _migrate_access(creds: Credentials) -> None:
    """An older folder's top-level ``api-keys.map`` moves into ``access/``; both maps exist afterwards."""
    creds.access_dir.mkdir(exist_ok=True)
    os.chmod(creds.access_dir, 0o700)
    old = creds.path("api-keys.map")
    if old.is_file():
        _replace_file(creds.key_map, "".join(_read_lines(creds.key_map)) + old.read_text())
        old.unlink()
    for path in (creds.key_map, creds.revoked_map):
        if not path.exists():
            _replace_file(path, "")


# --- clients ---------------------------------------------------------------------------------------------

def _check_name(name: str, role: str) -> None:
    if role not in ROLES:
        raise CertsError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
        raise CertsError(f"a client name is letters, digits, '-', '_' and '.', not {name!r}")
    if name in RESERVED_NAMES:
        raise CertsError(f"{name!r} is the {name}'s own credential, not a client's")


def _install_client(creds: Credentials, name: str, role: str) -> None:
    """A new certificate and API key for ``name``; its old key leaves the map, its old certificate is
    revoked (the caller holds the lock)."""
    key = secrets.token_hex(32)
    with tempfile.TemporaryDirectory(dir=creds.directory, prefix=".issue-") as tmp:
        work = Path(tmp)
        crt, private_key = _sign(creds, work, name, role, "client", _EXTENSIONS.format(san="DNS:unused"),
                                 out=work)
        key_file = work / "api-key"
        key_file.write_text(key + "\n")
        _private(key_file)
        # The map first: from here on only the new key is let in (after the gateway's next reload).
        _rewrite_key_map(creds, lambda lines: _without(name)(lines) + [f"{key} {role}:{name};\n"])
        _revoke_serial(creds, creds.cert(name), name)
        os.replace(private_key, creds.private_key(name))
        os.replace(crt, creds.cert(name))
        os.replace(key_file, creds.api_key_file(name))


def _existing_role(creds: Credentials, name: str) -> Optional[str]:
    roles = _key_roles(creds, name)
    if roles:
        return roles[-1]
    if creds.cert(name).is_file():
        subject = _openssl("x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in", str(creds.cert(name)))
        match = re.search(r"OU=([a-z]+)", subject)
        return match.group(1) if match else None
    return None


def _credentials(directory: Path) -> Credentials:
    creds = Credentials(Path(directory))
    if not creds.private_key("ca").is_file():
        raise CertsError(f"no CA in {creds.directory}: run `make certs` first")
    return creds


def issue_client(directory: Path, name: str, role: str = "client", *, force: bool = False) -> Credentials:
    """A client certificate and API key for ``name`` with ``role``, signed by the folder's CA.

    An existing ``name`` is refused unless ``force``, which replaces it as :func:`rotate_client` does
    (the old key leaves the map and the old certificate is revoked), with ``role``.
    """
    _check_name(name, role)
    creds = _credentials(directory)
    with _access_lock(creds):
        _migrate_access(creds)
        if (creds.cert(name).exists() or _key_roles(creds, name)) and not force:
            raise CertsError(f"{name} exists (`rotate {name}` replaces its key and certificate)")
        _install_client(creds, name, role)
    return creds


def rotate_client(directory: Path, name: str) -> Credentials:
    """A new key and certificate for the existing client ``name`` (same role); the old ones stop working
    at the gateway's next reload: the old key leaves ``api-keys.map``, the old certificate's serial joins
    ``revoked-serials.map``."""
    creds = _credentials(directory)
    with _access_lock(creds):
        _migrate_access(creds)
        role = _existing_role(creds, name)
        if role is None:
            raise CertsError(f"no client {name!r} in {creds.directory} (`issue {name}` adds one)")
        _check_name(name, role)
        _install_client(creds, name, role)
    return creds


def revoke_client(directory: Path, name: str) -> Credentials:
    """Removes the client ``name``: its keys leave ``api-keys.map``, its certificate's serial joins
    ``revoked-serials.map``, and its files (``.api-key``, ``.crt``, ``.key``) are deleted."""
    creds = _credentials(directory)
    if name in RESERVED_NAMES:
        raise CertsError(f"{name!r} is the {name}'s own credential: `--force init` makes everything anew")
    with _access_lock(creds):
        _migrate_access(creds)
        if not creds.cert(name).exists() and not _key_roles(creds, name):
            raise CertsError(f"no client {name!r} in {creds.directory}")
        _rewrite_key_map(creds, _without(name))
        _revoke_serial(creds, creds.cert(name), name)
        for path in (creds.api_key_file(name), creds.cert(name), creds.private_key(name)):
            path.unlink(missing_ok=True)
    return creds


def init_secrets(directory: Path = DEFAULT_DIR, *, server_names: Sequence[str] = (),
                 force: bool = False) -> Credentials:
    """A CA, server certificate and the :data:`DEFAULT_CLIENTS` in ``directory``.

    A folder that has a CA keeps it and everything in it; only what is missing is added (a default
    client issued after it, such as ``loadtest``, and ``access/``). ``force`` makes everything anew.
    """
    creds = Credentials(Path(directory))
    creds.directory.mkdir(parents=True, exist_ok=True)
    os.chmod(creds.directory, 0o700)
    with _access_lock(creds):
        if force or not creds.ca_cert.exists():
            _make_everything(creds, server_names)
        _migrate_access(creds)
        for name, role in DEFAULT_CLIENTS.items():
            if not creds.cert(name).exists():  # a key line left without its files is replaced
                _install_client(creds, name, role)
    return creds


def _make_everything(creds: Credentials, server_names: Sequence[str]) -> None:
    for stale in [*creds.directory.glob("*"), *creds.access_dir.glob("*")]:
        if stale.is_file() and stale.suffix in (".crt", ".key", ".api-key", ".map"):
            stale.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _make_ca(creds, work)
        san = _san([*DEFAULT_SERVER_NAMES, *server_names])
        _sign(creds, work, "server", "server", "server", _EXTENSIONS.format(san=san), common_name="gateway")


def write_grafana_password(directory: Path, password: str) -> Path:
    """``password`` into the folder's :data:`GRAFANA_PASSWORD_FILE` (replaced atomically), for compose's secret.

    Mode 0644 in the 0700 folder: the host's other users cannot reach it, and Grafana (uid 472 in its
    container, where compose bind-mounts the file itself) can read it.
    """
    if not password or any(c in password for c in "\r\n\0"):
        raise CertsError("a Grafana password is one line, not empty")
    path = Path(directory) / GRAFANA_PASSWORD_FILE
    _replace_file(path, password)
    os.chmod(path, 0o644)
    return path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gateway.certs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR, metavar="DIR",
                        help=f"the secrets folder (default: {DEFAULT_DIR})")
    parser.add_argument("--force", action="store_true",
                        help="init: make everything anew; issue: replace an existing client (as rotate)")
    sub = parser.add_subparsers(dest="command")
    init = sub.add_parser("init", help="a CA, server, client, admin and loadtest credentials (the default); "
                                       "on a folder with a CA, only what is missing")
    init.add_argument("--server-name", action="append", default=[], metavar="HOST",
                      help="another DNS name or IP address for the server certificate (repeatable)")
    issue = sub.add_parser("issue", help="a certificate and API key for another client")
    issue.add_argument("name")
    issue.add_argument("--role", choices=ROLES, default=None, help="what it may call (default: client)")
    issue.add_argument("--admin", action="store_true", help="the same as --role admin")
    rotate = sub.add_parser("rotate", help="a new key and certificate for NAME; the old ones stop working")
    rotate.add_argument("name")
    revoke = sub.add_parser("revoke", help="remove the client NAME: its key and certificate stop working")
    revoke.add_argument("name")
    sub.add_parser("grafana-password", help=f"write $GRAFANA_ADMIN_PASSWORD into {GRAFANA_PASSWORD_FILE} "
                                            "(compose's Grafana reads it; make up does this itself)")
    return parser


def _client_files(creds: Credentials, name: str) -> str:
    return f"{creds.cert(name)}, {creds.private_key(name)}, {creds.api_key_file(name)}"


def _run(args: argparse.Namespace) -> str:
    if args.command == "grafana-password":
        password = os.environ.get("GRAFANA_ADMIN_PASSWORD", "")
        if not password:
            raise CertsError("export GRAFANA_ADMIN_PASSWORD first (the stack has no default Grafana password)")
        return f"wrote {write_grafana_password(args.out, password)}"
    if args.command == "issue":
        if args.admin and args.role not in (None, "admin"):
            raise CertsError("--admin and --role name two roles")
        creds = issue_client(args.out, args.name, "admin" if args.admin else args.role or "client", force=args.force)
        return f"issued {_client_files(creds, args.name)}; {RELOAD_HINT}"
    if args.command == "rotate":
        creds = rotate_client(args.out, args.name)
        return f"rotated {args.name}: new {_client_files(creds, args.name)}; {RELOAD_HINT}"
    if args.command == "revoke":
        revoke_client(args.out, args.name)
        return f"revoked {args.name}: its key and certificate are refused; {RELOAD_HINT}"
    before = Credentials(args.out)
    kept = before.ca_cert.exists() and not args.force
    missing = [name for name in DEFAULT_CLIENTS if not before.cert(name).exists()]
    creds = init_secrets(args.out, server_names=getattr(args, "server_name", []), force=args.force)
    if kept:
        return (f"{creds.directory} has a CA: kept it and every existing file (`--force init` makes everything "
                f"anew); added: {', '.join(missing) or 'nothing'}"
                + (f"\n  {RELOAD_HINT}" if missing else ""))
    return (f"the local CA, server, client, admin and loadtest credentials are in {creds.directory}\n"
            f"  CA for clients:  {creds.ca_cert}\n"
            f"  API keys:        {creds.api_key_file('client')} (admin: {creds.api_key_file('admin')}, "
            f"load tests: {creds.api_key_file('loadtest')})\n"
            f"  mTLS:            {creds.cert('client')} + {creds.private_key('client')}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        print(_run(args))
    except CertsError as error:
        print(f"gateway.certs: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
