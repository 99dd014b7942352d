"""Debian's nginx with the repository's gateway templates, in front of the embedded server.

- ``nginx``: the binary ``make debs`` installs (Debian's ``nginx``); a test that
  takes it fails, not skips, where it is missing.
- ``gateway_secrets``: a CA, server, client and admin certificates and API keys
  made by :mod:`gateway.certs` (openssl) for this session, plus two clients of
  their own for the rate-limit tests.
- ``gateway``: nginx as a child process (``daemon off;`` from the template,
  this user, a prefix, pid and temp paths in tmp) with ``gateway/*.template``
  rendered by :func:`gateway.render_templates` for the host nginx's version
  (Debian 12's 1.22: ``http2`` on the ``listen`` lines) with the compose ``gateway``
  service's own environment (Compose's model), where only the listen
  addresses (free 127.0.0.1 ports), the upstreams (the embedded server) and
  the paths change. Its access log is nginx's stdout, its error log stderr.
- ``rate_gateway``: the same with a refill of one request a minute, for the
  rate-limit tests (compose's burst, a rate no machine's speed can outrun).
"""
from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence, Union

import grpc
import httpx
import pytest

from gateway import NginxVersion, installed_nginx_version, render_templates
from gateway.certs import Credentials, init_secrets, issue_client
from serving.config.compose import load_compose_model
from serving.server.launcher import ServerProcess, free_port, wait_for_port
from tests.compose.conftest import CPU, PASSWORD, compose_env

# The only values a test changes: where nginx listens, what it forwards to, and where its files are.
LOCAL_VALUES = ("GATEWAY_GRPC_LISTEN", "GATEWAY_REST_LISTEN", "GATEWAY_MTLS_LISTEN",
                "GATEWAY_GRPC_UPSTREAM", "GATEWAY_REST_UPSTREAM", "GATEWAY_RESOLVER", "GATEWAY_SECRETS_DIR",
                "GATEWAY_RUN_DIR")
# Clients with a rate bucket of their own, so exhausting it disturbs no other test.
BURST_CLIENTS = ("burst-rest", "burst-grpc", "burst-sdk")
MODEL = "digits"


@pytest.fixture(scope="session")
def nginx() -> str:
    """The path of Debian's ``nginx`` (in /usr/sbin, which a non-root PATH may lack)."""
    path = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
    assert path, "nginx is not installed: `make debs` installs it (Debian's nginx package; make test runs it)"
    return path


@pytest.fixture(scope="session")
def nginx_version(nginx) -> NginxVersion:
    """The host nginx's version: the gateway fixture renders the templates for it."""
    return installed_nginx_version(nginx)


@pytest.fixture(scope="session")
def gateway_secrets(tmp_path_factory) -> Credentials:
    creds = init_secrets(tmp_path_factory.mktemp("gateway-secrets"))
    for name in BURST_CLIENTS:
        issue_client(creds.directory, name)
    return creds


@pytest.fixture(scope="session")
def foreign_secrets(tmp_path_factory) -> Credentials:
    """Another CA's certificates: a server the clients must not trust, clients the gateway must refuse."""
    return init_secrets(tmp_path_factory.mktemp("foreign-secrets"))


@pytest.fixture(scope="session")
def compose_gateway_env() -> dict[str, str]:
    """The compose ``gateway`` service's environment, as Compose renders it from the files and .env."""
    model = load_compose_model(CPU, services=["gateway"], env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD))
    return dict(model["services"]["gateway"]["environment"])


@pytest.fixture(scope="session")
def tf_serving(model_repo: Path, tmp_path_factory) -> Iterator[ServerProcess]:
    """The embedded server with ``digits`` on free loopback ports."""
    work = tmp_path_factory.mktemp("tf-serving")
    with ServerProcess.for_models({MODEL: model_repo / MODEL}, workdir=work) as server:
        yield server


@dataclass
class Gateway:
    """A running nginx gateway: its ports, rendered config and logs."""

    proc: subprocess.Popen
    conf_dir: Path
    values: dict[str, str]
    ports: dict[str, int]
    access_log: Path
    error_log: Path
    secrets: Credentials
    upstream: ServerProcess
    nginx_version: NginxVersion

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.ports['grpc']}"

    @property
    def rest_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['rest']}"

    @property
    def mtls_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['mtls']}"

    @property
    def mtls_target(self) -> str:
        return f"127.0.0.1:{self.ports['mtls']}"

    def key(self, name: str = "client") -> str:
        return self.secrets.api_key(name)

    def tls_context(self, cert: str | None = None, creds: Credentials | None = None,
                    ca: Path | None = None) -> ssl.SSLContext:
        """Trusts ``ca`` (default: the gateway's CA); presents ``creds``' ``cert`` client certificate if named."""
        creds = creds or self.secrets
        context = ssl.create_default_context(cafile=str(ca or self.secrets.ca_cert))
        if cert:
            context.load_cert_chain(creds.cert(cert), creds.private_key(cert))
        return context

    def http(self, cert: str | None = None, creds: Credentials | None = None, ca: Path | None = None,
             **kwargs) -> httpx.Client:
        return httpx.Client(verify=self.tls_context(cert, creds, ca), timeout=30.0, **kwargs)

    def channel_credentials(self, cert: str | None = None, creds: Credentials | None = None,
                            ca: Path | None = None) -> grpc.ChannelCredentials:
        creds = creds or self.secrets
        root = Path(ca or self.secrets.ca_cert).read_bytes()
        if not cert:
            return grpc.ssl_channel_credentials(root)
        return grpc.ssl_channel_credentials(root, creds.private_key(cert).read_bytes(), creds.cert(cert).read_bytes())

    def access_entries(self, until: Callable[[list[dict]], bool] = lambda entries: True,
                       timeout: float = 5.0) -> list[dict]:
        """Every access-log line, parsed (each must be one JSON object), once ``until(entries)`` holds.

        nginx writes a request's line in its log phase, after the response went out, so a client can
        read its answer before the line is there: the file is read again until it is (or ``timeout``).
        """
        deadline = time.monotonic() + timeout
        while True:
            entries = [json.loads(line) for line in self.access_log.read_text().splitlines() if line.strip()]
            if until(entries) or time.monotonic() > deadline:
                return entries
            threading.Event().wait(0.02)


def nginx_command(nginx: Union[str, Sequence[str]], conf: Path, prefix: Path) -> list[str]:
    """``nginx`` (a path, or a command that runs it, such as ``docker run ... nginx``) with this config."""
    command = [*([nginx] if isinstance(nginx, str) else nginx), "-p", f"{prefix}/", "-e", "stderr", "-c", str(conf)]
    if os.geteuid() == 0:
        # As root, nginx would run its workers as `nobody`; keep them this user, as compose does.
        command += ["-g", f"user {pwd.getpwuid(os.geteuid()).pw_name};"]
    return command


@contextlib.contextmanager
def running_gateway(nginx: Union[str, Sequence[str]], nginx_version: NginxVersion, values: dict[str, str], root: Path,
                    secrets: Credentials, upstream: ServerProcess) -> Iterator[Gateway]:
    """nginx with the templates rendered from ``values`` (listen addresses and paths set here) in ``root``."""
    run_dir, conf_dir = root / "run", root / "conf"
    run_dir.mkdir(parents=True)
    ports = {"grpc": free_port(), "rest": free_port(), "mtls": free_port()}
    values = {**values, "GATEWAY_GRPC_LISTEN": f"127.0.0.1:{ports['grpc']}",
              "GATEWAY_REST_LISTEN": f"127.0.0.1:{ports['rest']}", "GATEWAY_MTLS_LISTEN": f"127.0.0.1:{ports['mtls']}",
              "GATEWAY_SECRETS_DIR": str(secrets.directory), "GATEWAY_RUN_DIR": str(run_dir)}
    conf = render_templates(values, conf_dir, nginx_version=nginx_version)
    command = nginx_command(nginx, conf, run_dir)
    check = subprocess.run([*command, "-t"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    access_log, error_log = root / "access.log", root / "error.log"
    with open(access_log, "wb") as stdout, open(error_log, "wb") as stderr:
        proc = subprocess.Popen(command, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL)
    try:
        for port in ports.values():
            wait_for_port(port, timeout=20, alive=lambda: proc.poll() is None)
        yield Gateway(proc, conf_dir, values, ports, access_log, error_log, secrets, upstream, nginx_version)
    finally:
        proc.send_signal(signal.SIGQUIT)  # graceful shutdown
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def compose_values(compose_gateway_env: dict[str, str], **local: str) -> dict[str, str]:
    """The compose service's GATEWAY_* values with ``local`` (only :data:`LOCAL_VALUES`) changed."""
    assert set(local) <= set(LOCAL_VALUES), set(local) - set(LOCAL_VALUES)
    return {**{k: v for k, v in compose_gateway_env.items() if k.startswith("GATEWAY_")}, **local}


def upstream_values(tf_serving: ServerProcess) -> dict[str, str]:
    """The gateway's upstreams set to the embedded server."""
    return {"GATEWAY_GRPC_UPSTREAM": tf_serving.grpc_target,
            "GATEWAY_REST_UPSTREAM": f"127.0.0.1:{tf_serving.rest_port}",
            # The upstreams are IP literals, never looked up; nginx still needs a resolver to parse.
            "GATEWAY_RESOLVER": "127.0.0.1"}


@pytest.fixture(scope="session")
def gateway(nginx, nginx_version, gateway_secrets, compose_gateway_env, tf_serving,
            tmp_path_factory) -> Iterator[Gateway]:
    values = compose_values(compose_gateway_env, **upstream_values(tf_serving))
    with running_gateway(nginx, nginx_version, values, tmp_path_factory.mktemp("gateway"), gateway_secrets,
                         tf_serving) as gateway:
        yield gateway


# The rate-limit tests' refill: one request a minute, so the compose burst runs out however slowly this
# machine sends. At compose's 100 r/s, a client slower than 100 sequential requests a second (a loaded
# CI runner through TLS) never drains the bucket, and the test would depend on the machine's speed.
SLOW_REFILL = "1r/m"


@pytest.fixture(scope="session")
def rate_gateway(nginx, nginx_version, gateway_secrets, compose_gateway_env, tf_serving,
                 tmp_path_factory) -> Iterator[Gateway]:
    """The gateway with compose's values, burst included, but :data:`SLOW_REFILL` for its rate."""
    values = {**compose_values(compose_gateway_env, **upstream_values(tf_serving)), "GATEWAY_RATE": SLOW_REFILL}
    with running_gateway(nginx, nginx_version, values, tmp_path_factory.mktemp("rate-gateway"), gateway_secrets,
                         tf_serving) as gateway:
        yield gateway
