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
* and real TF Serving in Docker: the compose CPU variant's image
  (``serving.stack.docker.tfserving_image``), started by
  ``serving.stack.docker.run_tf_serving``; skipped with the reason where no
  engine answers or the image is not present locally (it is never pulled).

The client side is parametrised too (``clients.CLIENT_KINDS``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import grpc
import httpx
import pytest

from serving.launcher import wait_until_available
from serving.stack.docker import Mount, run_tf_serving, tfserving_image, tfserving_unavailable
from tests.support.contract import layout
from tests.support.contract import tfs_testdata as tfs_testdata_layout
from tests.support.contract.clients import CLIENT_KINDS, make_client
from tests.support.servers import EmbeddedServer


@dataclass
class Endpoint:
    """A running TF Serving(-compatible) server and the model repository it serves."""

    kind: str                 # "embedded" | "docker" | "external"
    grpc_target: str
    rest_url: str
    repo: Path                # as this process sees it (manifests, publishing new versions)
    root_in_server: Path      # the same directory as the server sees it (config base paths)
    embedded: Optional[EmbeddedServer] = None


def _start_docker(repo: Path, image: str) -> Iterator[Endpoint]:
    with run_tf_serving(layout.server_flags(Path("/models")), image=image,
                        mounts=[Mount(repo, "/models", read_only=False)], wait_for=layout.MODELS) as container:
        yield Endpoint("docker", container.grpc_target, container.rest_url, repo, Path("/models"))


@pytest.fixture(scope="session", params=["server", pytest.param("docker", marks=pytest.mark.docker)])
def endpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    """The server under contract; one per session (per kind)."""
    external = os.environ.get("TFS_CONTRACT_GRPC"), os.environ.get("TFS_CONTRACT_REST")
    if request.param == "docker":
        if any(external):
            pytest.skip("TFS_CONTRACT_* names an external endpoint; the Docker variant is not started")
        image = tfserving_image()
        reason = tfserving_unavailable(image)
        if reason:
            pytest.skip(reason)
    if all(external):
        repo = Path(os.environ["TFS_CONTRACT_MODELS"])
        root = Path(os.environ.get("TFS_CONTRACT_MODELS_IN_SERVER", str(repo)))
        wait_until_available(external[1].rstrip("/"), layout.MODELS, 300.0)
        yield Endpoint("external", external[0], external[1].rstrip("/"), repo, root)
        return
    exported = os.environ.get("TFS_CONTRACT_EXPORTED_REPO")
    model_repo = Path(exported) if exported else request.getfixturevalue("model_repo")
    repo = tmp_path_factory.mktemp("contract") / "models"
    if request.param == "docker":
        layout.write_contract_repo(model_repo, repo, Path("/models"))
        yield from _start_docker(repo, image)
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


@pytest.fixture(scope="session", params=["server", pytest.param("docker", marks=pytest.mark.docker)])
def tfs_testdata(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    """A server of TF Serving's own test models (``tfs_testdata``), for the ported TF Serving tests."""
    repo = tmp_path_factory.mktemp("tfs-testdata") / "models"
    if request.param == "docker":
        image = tfserving_image()
        reason = tfserving_unavailable(image)
        if reason:
            pytest.skip(reason)
        tfs_testdata_layout.write_testdata_repo(repo, Path("/models"))
        with run_tf_serving(tfs_testdata_layout.testdata_flags(Path("/models")), image=image,
                            mounts=[Mount(repo, "/models", read_only=False)],
                            wait_for=tfs_testdata_layout.TESTDATA_MODELS) as container:
            yield Endpoint("docker", container.grpc_target, container.rest_url, repo, Path("/models"))
        return
    tfs_testdata_layout.write_testdata_repo(repo)
    server = EmbeddedServer(tfs_testdata_layout.testdata_flags(repo), wait_for=tfs_testdata_layout.TESTDATA_MODELS,
                            log_path=repo.parent / "server.log")
    with server:
        yield Endpoint("embedded", server.grpc_target, server.rest_url, repo, repo, embedded=server)


@pytest.fixture
def tfs_rest(tfs_testdata: Endpoint) -> Iterator[httpx.Client]:
    """Raw HTTP to the TF Serving test-model server's REST port."""
    with httpx.Client(base_url=tfs_testdata.rest_url, timeout=60.0) as http:
        yield http


@pytest.fixture
def tfs_channel(tfs_testdata: Endpoint) -> Iterator[grpc.Channel]:
    """A gRPC channel to the TF Serving test-model server."""
    with grpc.insecure_channel(tfs_testdata.grpc_target) as channel:
        yield channel
