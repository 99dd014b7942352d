"""A canary on the embedded server behind the real nginx gateway, for the canary-route and rollout tests.

:func:`canary_repo` lays out ``digits`` versions 1 (the session export) and 2
(a SavedModel the test chooses), and :func:`labelled_config` the models config
that serves both with ``stable`` -> 1 and ``canary`` -> 2, plus models
without labels. :func:`canary_gateway` runs the gateway (compose's values, a
rate no test reaches) in front of that server.
"""
from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional, Sequence

import httpx

from gateway import NginxVersion
from gateway.certs import Credentials
from serving.launcher import ServerProcess, write_config_files
from serving.rollout.cli import main as rollout_main
from tests.support.gateway import Gateway, compose_values, running_gateway, upstream_values

MODEL = "digits"
# The gateway's own rate limit is not what these tests measure: thousands of requests from one client.
UNLIMITED_RATE = "100000r/s"


def canary_repo(model_repo: Path, root: Path, v2: Optional[Path] = None, others: Sequence[str] = ()) -> Path:
    """``root`` with digits 1 (the export) and 2 (``v2``, default a copy of 1), and ``others`` at version 1."""
    shutil.copytree(model_repo / MODEL / "1", root / MODEL / "1")
    shutil.copytree(v2 or model_repo / MODEL / "1", root / MODEL / "2")
    for name in others:
        shutil.copytree(model_repo / name, root / name)
    return root


def labelled_config(repo: Path, labels: Mapping[str, int], others: Sequence[str] = ()) -> str:
    """A models config: digits serving ``labels``' versions with those labels; ``others`` with no label."""
    versions = "".join(f" versions: {v}" for v in sorted(set(labels.values())))
    label_lines = "".join(f" version_labels {{ key: '{k}' value: {v} }}" for k, v in sorted(labels.items()))
    entries = [f"config {{ name: '{MODEL}' base_path: '{repo / MODEL}' model_platform: 'tensorflow' "
               f"model_version_policy {{ specific {{{versions} }} }}{label_lines} }}"]
    entries += [f"config {{ name: '{name}' base_path: '{repo / name}' model_platform: 'tensorflow' }}"
                for name in others]
    return "model_config_list { " + " ".join(entries) + " }\n"


@contextlib.contextmanager
def canary_server(repo: Path, work: Path, labels: Mapping[str, int], others: Sequence[str] = ()
                  ) -> Iterator[ServerProcess]:
    """The embedded server on ``repo`` with :func:`labelled_config`, its config file in ``work``."""
    # Labels in the first config name versions still loading: TF Serving takes them only with this flag.
    flags = [*write_config_files(work, {}), "--allow_version_labels_for_unavailable_models=true"]
    (work / "models.config").write_text(labelled_config(repo, labels, others))
    with ServerProcess(flags, wait_for=[MODEL, *others], log_path=work / "server.log", timeout=240) as server:
        yield server


@contextlib.contextmanager
def canary_gateway(nginx: str, nginx_version: NginxVersion, compose_gateway_env: dict[str, str], root: Path,
                   secrets: Credentials, server: ServerProcess) -> Iterator[Gateway]:
    values = {**compose_values(compose_gateway_env, **upstream_values(server)), "GATEWAY_RATE": UNLIMITED_RATE}
    with running_gateway(nginx, nginx_version, values, root, secrets, server) as gateway:
        yield gateway


def send_resending_once(send: Callable[[], httpx.Response], resent: list) -> httpx.Response:
    """``send()``, and once more if the keep-alive connection it went out on was closed without an answer.

    A reload retires nginx's old workers, which close their idle keep-alive connections at once; a request
    sent on one in that instant gets no answer (httpx: ``RemoteProtocolError``), and a client may send it
    again on a new connection (RFC 9112 9.3.1; the SDK resends idempotent calls). Each resend is appended to
    ``resent``; a second failure raises.
    """
    try:
        return send()
    except httpx.RemoteProtocolError as exc:
        resent.append(str(exc))
        return send()


class RolloutOnGateway:
    """``python -m serving.rollout`` run in process on ``server`` behind the host's nginx ``gateway``: the label
    commands push to the server and move the gateway's routes; analysis calls through the gateway with TLS and
    the ``ANALYSIS_KEY`` credential."""

    ANALYSIS_KEY = "client"

    def __init__(self, repo: Path, work: Path, server: ServerProcess, gateway: Gateway, nginx: str) -> None:
        self.repo, self.work, self.server, self.gateway, self.nginx = repo, work, server, gateway, nginx
        self.config = work / "models.config"

    def where(self, command: str) -> list[str]:
        """The flags that point ``command`` at this server, its config, the gateway and its credentials."""
        where = ["--grpc", self.server.grpc_target, "--config-file", str(self.config), "--model-repo", str(self.repo)]
        if command in ("canary", "promote", "rollback", "auto"):
            where += ["--gateway", "nginx", "--nginx-conf", str(self.gateway.conf_dir / "nginx.conf"),
                      "--nginx", self.nginx]
        if command in ("analyze", "auto"):
            where += ["--rest", self.gateway.rest_url, "--root-certificates", str(self.gateway.secrets.ca_cert),
                      "--api-key", self.gateway.key(self.ANALYSIS_KEY)]
        return where

    def rollout(self, command: str, *args: str) -> tuple[int, str]:
        """``command`` with ``args`` and :meth:`where`'s flags: its exit code and what it printed."""
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = rollout_main([command, *args, *self.where(command)])
        return code, out.getvalue()
