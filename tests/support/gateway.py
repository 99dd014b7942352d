"""The gateway under test: Debian's nginx with the repository's templates, in front of the embedded server.

``running_gateway`` renders ``gateway/*.template`` with the compose service's values (only the listen
addresses, upstreams and paths changed, :data:`LOCAL_VALUES`) and runs nginx as a child process;
``Gateway`` is what a test talks to.
"""
from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
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
from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

from gateway import NginxVersion, render_templates
from gateway.certs import Credentials
from serving.launcher import ServerProcess, free_ports, port_open
from tests.support.processes import LoggedProcess

__all__ = ["LOCAL_VALUES", "BURST_CLIENTS", "MODEL", "SLOW_REFILL", "Gateway", "nginx_command", "running_gateway",
           "compose_values", "upstream_values", "nginx_size", "model_status", "served_config"]

# The only values a test changes: where nginx listens, what it forwards to, and where its files are.
LOCAL_VALUES = ("GATEWAY_GRPC_LISTEN", "GATEWAY_REST_LISTEN", "GATEWAY_MTLS_LISTEN",
                "GATEWAY_GRPC_UPSTREAM", "GATEWAY_REST_UPSTREAM", "GATEWAY_RESOLVER", "GATEWAY_SECRETS_DIR",
                "GATEWAY_RUN_DIR", "GATEWAY_CAPTURE_UPSTREAM")
# Compose's capture service (capture:8080, looked up while nginx runs) has no address on the host: the
# discard port stands in, never reached while GATEWAY_CAPTURE is off (tests/gateway/test_capture.py sets its sink's).
NO_CAPTURE_SERVICE = "127.0.0.1:9"
# Clients with a rate bucket of their own, so exhausting it disturbs no other test.
BURST_CLIENTS = ("burst-rest", "burst-grpc", "burst-sdk")
MODEL = "digits"


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
    ports = dict(zip(("grpc", "rest", "mtls"), free_ports(3)))
    values = {**values, "GATEWAY_GRPC_LISTEN": f"127.0.0.1:{ports['grpc']}",
              "GATEWAY_REST_LISTEN": f"127.0.0.1:{ports['rest']}", "GATEWAY_MTLS_LISTEN": f"127.0.0.1:{ports['mtls']}",
              "GATEWAY_SECRETS_DIR": str(secrets.directory), "GATEWAY_RUN_DIR": str(run_dir)}
    conf = render_templates(values, conf_dir, nginx_version=nginx_version)
    command = nginx_command(nginx, conf, run_dir)
    check = subprocess.run([*command, "-t"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    access_log, error_log = root / "access.log", root / "error.log"
    nginx_process = LoggedProcess(command, access_log, stderr_log=error_log, stdin=subprocess.DEVNULL)
    nginx_process.start(lambda: all(port_open(port) for port in ports.values()), "nginx", 20)
    try:
        yield Gateway(nginx_process.proc, conf_dir, values, ports, access_log, error_log, secrets, upstream,
                      nginx_version)
    finally:
        nginx_process.stop(15, sig=signal.SIGQUIT)  # nginx's graceful shutdown


def compose_values(compose_gateway_env: dict[str, str], **local: str) -> dict[str, str]:
    """The compose service's GATEWAY_* values with ``local`` (only :data:`LOCAL_VALUES`) changed."""
    assert set(local) <= set(LOCAL_VALUES), set(local) - set(LOCAL_VALUES)
    return {**{k: v for k, v in compose_gateway_env.items() if k.startswith("GATEWAY_")},
            "GATEWAY_CAPTURE_UPSTREAM": NO_CAPTURE_SERVICE, **local}


def upstream_values(tf_serving: ServerProcess) -> dict[str, str]:
    """The gateway's upstreams set to the embedded server."""
    return {"GATEWAY_GRPC_UPSTREAM": tf_serving.grpc_target,
            "GATEWAY_REST_UPSTREAM": f"127.0.0.1:{tf_serving.rest_port}",
            # The upstreams are IP literals, never looked up; nginx still needs a resolver to parse.
            "GATEWAY_RESOLVER": "127.0.0.1"}


# The rate-limit tests' refill: one request a minute, so the compose burst runs out however slowly this
# machine sends. At compose's 100 r/s, a client slower than 100 sequential requests a second (a loaded
# CI runner through TLS) never drains the bucket, and the test would depend on the machine's speed.
SLOW_REFILL = "1r/m"


def nginx_size(value: str) -> int:
    """nginx's size syntax: 64m, 512k, 1g or bytes."""
    number, unit = re.fullmatch(r"(\d+)([kKmMgG]?)", value).groups()
    return int(number) << {"": 0, "k": 10, "m": 20, "g": 30}[unit.lower()]


def model_status(channel: grpc.Channel, metadata) -> get_model_status_pb2.GetModelStatusResponse:
    """GetModelStatus of :data:`MODEL` over ``channel`` with ``metadata``."""
    stub = model_service_pb2_grpc.ModelServiceStub(channel)
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = MODEL
    return stub.GetModelStatus(request, metadata=metadata, timeout=30)


def served_config(gateway: Gateway) -> str:
    """The embedded server's own models config: a reload that changes nothing."""
    return (gateway.upstream.log_path.parent / "models.config").read_text()
