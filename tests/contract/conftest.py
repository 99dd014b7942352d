"""Contract suite: behaviour any TF Serving endpoint must show, run against one of

* an endpoint given in the environment — ``TFS_CONTRACT_GRPC=host:port``,
  ``TFS_CONTRACT_REST=http://host:port`` and ``TFS_CONTRACT_MODELS=<dir>``,
  a writable directory laid out by ``layout.write_contract_repo`` that the
  server serves with the ``models.config`` written there (base paths as the
  server sees them: ``TFS_CONTRACT_MODELS_IN_SERVER``, default the same dir),
  plus the ``batching.config`` and ``monitoring.config`` written beside it;
* otherwise the embedded server (``python -m serving.server``), started once
  per session over a writable copy of the ``model_repo`` fixture (or of the
  exported repository named by ``TFS_CONTRACT_EXPORTED_REPO``);
* and, where a Docker engine answers, real ``tensorflow/serving:2.17.1``
  started with the docker SDK (skipped with the reason otherwise).

The client side is parametrised too (``clients.CLIENT_KINDS``).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import httpx
import pytest

from tests.contract import layout
from tests.contract.clients import CLIENT_KINDS, make_client
from tests.support.servers import EmbeddedServer

TFS_IMAGE = "tensorflow/serving:2.17.1"


@dataclass
class Endpoint:
    """A running TF Serving(-compatible) server and the model repository it serves."""

    kind: str                 # "embedded" | "docker" | "external"
    grpc_target: str
    rest_url: str
    repo: Path                # as this process sees it (manifests, publishing new versions)
    root_in_server: Path      # the same directory as the server sees it (config base paths)
    embedded: Optional[EmbeddedServer] = None


def _docker_skip_reason() -> Optional[str]:
    try:
        import docker

        docker.from_env().ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine here"
        return f"no Docker engine answers (docker.from_env().ping() failed: {type(exc).__name__})"
    return None


def _wait_rest(rest_url: str, models: list[str], timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    pending = list(models)
    while pending and time.monotonic() < deadline:
        try:
            body = httpx.get(f"{rest_url}/v1/models/{pending[0]}", timeout=2.0).json()
            if any(v.get("state") == "AVAILABLE" for v in body.get("model_version_status", [])):
                pending.pop(0)
                continue
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    if pending:
        raise TimeoutError(f"models never became AVAILABLE: {pending}")


def _start_docker(repo: Path) -> Iterator[Endpoint]:
    import docker

    client = docker.from_env()
    container = client.containers.run(
        TFS_IMAGE, detach=True, remove=True,
        ports={"8500/tcp": None, "8501/tcp": None},
        volumes={str(repo): {"bind": "/models", "mode": "rw"}},
        entrypoint=["tensorflow_model_server"],
        command=["--port=8500", "--rest_api_port=8501", *layout.server_flags(Path("/models"))])
    try:
        container.reload()
        ports = container.attrs["NetworkSettings"]["Ports"]
        grpc_port, rest_port = ports["8500/tcp"][0]["HostPort"], ports["8501/tcp"][0]["HostPort"]
        endpoint = Endpoint("docker", f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{rest_port}", repo,
                            Path("/models"))
        _wait_rest(endpoint.rest_url, layout.MODELS)
        yield endpoint
    finally:
        container.stop(timeout=10)


@pytest.fixture(scope="session", params=["server", pytest.param("docker", marks=pytest.mark.docker)])
def endpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    """The server under contract; one per session (per kind)."""
    external = os.environ.get("TFS_CONTRACT_GRPC"), os.environ.get("TFS_CONTRACT_REST")
    if request.param == "docker":
        if any(external):
            pytest.skip("TFS_CONTRACT_* names an external endpoint; the Docker variant is not started")
        reason = _docker_skip_reason()
        if reason:
            pytest.skip(f"real TF Serving {TFS_IMAGE} not run: {reason}")
    if all(external):
        repo = Path(os.environ["TFS_CONTRACT_MODELS"])
        root = Path(os.environ.get("TFS_CONTRACT_MODELS_IN_SERVER", str(repo)))
        _wait_rest(external[1], layout.MODELS)
        yield Endpoint("external", external[0], external[1].rstrip("/"), repo, root)
        return
    exported = os.environ.get("TFS_CONTRACT_EXPORTED_REPO")
    model_repo = Path(exported) if exported else request.getfixturevalue("model_repo")
    repo = tmp_path_factory.mktemp("contract") / "models"
    if request.param == "docker":
        layout.write_contract_repo(model_repo, repo, Path("/models"))
        yield from _start_docker(repo)
        return
    layout.write_contract_repo(model_repo, repo)
    server = EmbeddedServer(layout.server_flags(repo), wait_for=layout.MODELS,
                            log_path=repo.parent / "server.log")
    with server:
        yield Endpoint("embedded", server.grpc_target, server.rest_url, repo, repo, embedded=server)


@pytest.fixture(params=CLIENT_KINDS)
def client(request: pytest.FixtureRequest, endpoint: Endpoint):
    """Each client kind against the endpoint."""
    made = make_client(request.param, endpoint.grpc_target, endpoint.rest_url)
    yield made
    made.close()


@pytest.fixture
def rest(endpoint: Endpoint) -> Iterator[httpx.Client]:
    """Raw HTTP to the endpoint's REST port."""
    with httpx.Client(base_url=endpoint.rest_url, timeout=60.0) as http:
        yield http
