"""Shared fixtures: a model repository exported by the real exporter, and the Debian tools.

Exports are cached under ``.cache/test-models/<hash of the exporter's code>``
(``tests.support.models.cached_export``), so editing the exporter re-exports and a
clean clone exports once. Tests that change a repository
take ``model_repo_copy`` instead of writing into the cache.

``promtool`` and ``prometheus`` are the paths of the tools that ``make test``
installs (``make debs``); a test that takes one fails, not skips, where it is
missing.
"""
from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import Iterator, Optional

import pytest

from gateway import NginxVersion, installed_nginx_version
from gateway.certs import Credentials, init_secrets, issue_client
from serving.config.compose import load_compose_model
from tests.support.compose import CPU, PASSWORD, compose_env
from tests.support.gateway import BURST_CLIENTS
from tests.support.models import SMALL_MODELS, cached_export


@pytest.fixture(scope="session")
def model_repo() -> Path:
    """A read-only repository with digits, text and ranker at version 1 (fp32)."""
    return cached_export(SMALL_MODELS)


@pytest.fixture(scope="session")
def resnet50_repo() -> Path:
    """The same cache with resnet50 version 1 exported too (slow the first time)."""
    return cached_export(("resnet50",))


@pytest.fixture(scope="session")
def cpu_stack_repo(model_repo: Path, resnet50_repo: Path) -> Path:
    """digits, text, ranker, resnet50 (fp32) and digits_xla, resnet50_xla, version 1 each: every model
    the CPU compose stack serves (serving/models.cpu.config)."""
    root = cached_export(("digits", "resnet50"), variant="xla")
    assert root == model_repo == resnet50_repo
    return root


@pytest.fixture
def model_repo_copy(model_repo: Path, tmp_path: Path) -> Path:
    """A writable copy of ``model_repo`` for tests that publish or delete versions."""
    dest = tmp_path / "models"
    shutil.copytree(model_repo, dest, ignore=shutil.ignore_patterns(".lock"))
    return dest


def _debian_tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not on PATH: `make debs` installs it (Debian's prometheus package; make test runs it)"
    return path


@pytest.fixture(scope="session")
def promtool() -> str:
    """The path of ``promtool``."""
    return _debian_tool("promtool")


@pytest.fixture(scope="session")
def prometheus() -> str:
    """The path of the ``prometheus`` server binary."""
    return _debian_tool("prometheus")


# The gateway's parts (the gateway and rollout tests): Debian's nginx, the session's certificates, compose's values.
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
def compose_gateway_env() -> dict[str, str]:
    """The compose ``gateway`` service's environment, as Compose renders it from the files and .env."""
    model = load_compose_model(CPU, services=["gateway"], env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD))
    return dict(model["services"]["gateway"]["environment"])


# Under pytest-xdist (make test runs ``-n 2 --dist loadgroup``), everything that drives the Docker engine
# (docker-marked tests and tests/e2e/) is one group, on one worker: one compose stack, started once, and
# never two compose projects at once. Every other test is sent to whichever worker is free.
ENGINE_GROUP = "docker-engine"


def on_the_engine(item: pytest.Item) -> bool:
    """Whether ``item`` drives the Docker engine: marked ``docker``, or in ``tests/e2e/``."""
    return item.get_closest_marker("docker") is not None or item.nodeid.startswith("tests/e2e/")


@pytest.hookimpl(tryfirst=True)   # before pytest-xdist's own, which turns each test's group into its node id
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that needs a Docker engine is slow too: the fast tier (-m "not slow") needs no engine.
    The engine's tests get their worker group (``xdist_group``), read by ``--dist loadgroup``."""
    for item in items:
        if item.get_closest_marker("docker") is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
        if on_the_engine(item):
            item.add_marker(pytest.mark.xdist_group(ENGINE_GROUP))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Optional[pytest.Item]) -> Iterator[None]:
    """Under pytest-xdist, a test marked ``alone`` runs while the other workers run no test: a peak-RSS
    bound, a load set from a measured saturation or a noise bound must not share the two cores with
    another test's load. Around each test's whole protocol
    (the module and session fixtures it sets up or tears down included), every test takes a shared
    lock and an ``alone`` one the exclusive lock; a turnstile, held by an ``alone`` test while it waits,
    keeps new tests from overtaking it. Without xdist (one process) nothing is locked."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    locks = item.config.rootpath / ".cache"
    locks.mkdir(exist_ok=True)
    alone = item.get_closest_marker("alone") is not None
    with open(locks / "tests.turnstile", "a") as turnstile, open(locks / "tests.lock", "a") as tests:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(tests, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(tests, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
