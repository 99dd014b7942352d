"""The client SDK installs beside an application's own numpy 2 and calls a real server from there.

The SDK is a library: its base dependencies are ranges (pyproject.toml), so
installing it must not move what the application already has. The test builds
the wheel from a copy of the tracked tree, makes a fresh venv holding numpy 2,
installs the wheel without extras, checks pip kept numpy 2, and calls the
embedded server (a real one, on free ports) with ``GrpcClient`` and
``RestClient`` from that venv, with neither the checkout nor PYTHONPATH on its path.
A second venv holds the lower bound of every base range instead, so both ends
of the ranges are tested (the shared venv tests the pins between).

Wheels are downloaded once into ``.cache/sdk-install/wheels``; a rerun installs
from there with ``--no-index`` (no network), and downloads again only when
that fails (a changed range).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from serving.checkout import REPO_ROOT
from tests.support.models import export_tiny
from tests.support.servers import EmbeddedServer
from tests.support.serving import MONITORING_PATH, tiny_flags

pytestmark = pytest.mark.slow

WHEELS = REPO_ROOT / ".cache" / "sdk-install" / "wheels"
# What the application holds before it installs the SDK: numpy 2 (a release with wheels for every Python the
# project supports, 3.10 to 3.12), and, as a second application, the lower bound of every base range.
APPS = {
    "numpy2": ("numpy==2.2.6",),
    "lower-bounds": ("numpy==1.24.4", "protobuf==4.25.0", "grpcio==1.62.0", "httpx==0.27.0", "httpcore==1.0.0", "orjson==3.9.0"),
}
# What the SDK's wheel is built from: the packages pyproject.toml ships, and the files it reads.
SOURCES = ("pyproject.toml", "README.md", "serving", "exporter", "loadtest", "monitoring", "gateway", "deploy")

CALL = textwrap.dedent("""
    import json, sys
    import google.protobuf, grpc, httpcore, httpx, numpy as np, orjson
    import serving
    from serving.client import GrpcClient, RestClient
    grpc_target, rest_url = sys.argv[1], sys.argv[2]
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    with GrpcClient(grpc_target) as client:
        over_grpc = client.predict("tiny", {"x": x})
    with RestClient(rest_url) as client:
        over_rest = client.predict("tiny", {"x": x})
    print(json.dumps({
        "serving": serving.__file__,
        "versions": {"numpy": np.__version__, "protobuf": google.protobuf.__version__,
                     "grpcio": grpc.__version__, "httpx": httpx.__version__, "httpcore": httpcore.__version__,
                     "orjson": orjson.__version__},
        "grpc": {name: value.tolist() for name, value in over_grpc.items()},
        "rest": {name: value.tolist() for name, value in over_rest.items()},
    }))
""")


def _run(*command: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "PYTHONHOME")}
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"
    return result


def _install(pip: list[str], *requirements: str) -> None:
    """``pip install`` from the wheel cache alone; on a miss, download into the cache first."""
    offline = [*pip, "install", "-q", "--no-index", "--find-links", str(WHEELS), *requirements]
    env = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "PYTHONHOME")}
    if subprocess.run(offline, env=env, capture_output=True, timeout=900).returncode != 0:
        _run(*pip, "download", "-q", "-d", str(WHEELS), *requirements)
        for built in WHEELS.glob("tfs_stack-*.whl"):  # the wheel is built anew each run; only its dependencies stay
            built.unlink()
        _run(*offline)


@pytest.fixture(scope="module")
def sdk_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, built without extras from a copy (the tree gets no build files)."""
    source = tmp_path_factory.mktemp("sdk-source")
    for name in SOURCES:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(path, source / name)
    out = tmp_path_factory.mktemp("sdk-wheel")
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
         str(source))
    (wheel,) = out.glob("tfs_stack-*.whl")
    return wheel


@pytest.fixture(scope="module", params=sorted(APPS))
def app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
        sdk_wheel: Path) -> tuple[Path, dict[str, str]]:
    """A fresh venv holding the application's packages first; then the SDK installed into it.
    Returns the venv and ``{name: version}`` of what the application held."""
    held = dict(requirement.split("==") for requirement in APPS[request.param])
    venv = tmp_path_factory.mktemp(request.param) / "venv"
    _run(sys.executable, "-m", "venv", str(venv))
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    WHEELS.mkdir(parents=True, exist_ok=True)
    _install(pip, *APPS[request.param])
    _install(pip, str(sdk_wheel))
    return venv, held


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("sdk-models")
    export_tiny(repo / "tiny" / "1")
    (repo / "monitoring.config").write_text(f'prometheus_config {{ enable: true, path: "{MONITORING_PATH}" }}\n')
    with EmbeddedServer(tiny_flags(repo), wait_for=["tiny"]) as server:
        yield server


def test_installing_the_sdk_keeps_what_the_application_holds(app):
    app_venv, held = app
    listed = _run(str(app_venv / "bin" / "python"), "-m", "pip", "list", "--format=json").stdout
    versions = {row["name"].lower(): row["version"] for row in json.loads(listed)}
    assert {name: versions[name] for name in held} == held  # numpy 2 stays numpy 2; lower bounds stay
    assert {"tfs-stack", "protobuf", "grpcio", "httpx", "orjson"} <= set(versions)
    # The base install is the SDK: no TensorFlow, no embedded server's extras.
    assert not {"tensorflow", "tensorflow-cpu", "aiohttp", "prometheus-client"} & set(versions)


def test_the_sdk_ships_py_typed(app):
    app_venv, _ = app
    site = _run(str(app_venv / "bin" / "python"), "-c", "import serving, os; print(os.path.dirname(serving.__file__))",
                cwd=app_venv).stdout.strip()
    assert (Path(site) / "py.typed").is_file()


def test_grpc_and_rest_predict_from_the_applications_venv(app, tiny_server, tmp_path: Path):
    app_venv, held = app
    script = tmp_path / "call.py"
    script.write_text(CALL)
    answer = json.loads(_run(str(app_venv / "bin" / "python"), str(script), f"127.0.0.1:{tiny_server.grpc_port}",
                             f"http://127.0.0.1:{tiny_server.rest_port}", cwd=tmp_path).stdout)
    print(json.dumps(answer, indent=1))  # the versions pip kept and the answers, for the record (pytest -s)
    assert Path(answer["serving"]).is_relative_to(app_venv)  # the installed SDK, not the checkout
    assert {name: answer["versions"][name] for name in held} == held
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    for transport in ("grpc", "rest"):
        np.testing.assert_array_equal(np.array(answer[transport]["y"], np.float32), 2.0 * x)
        np.testing.assert_array_equal(np.array(answer[transport]["total"], np.float32), (2.0 * x).sum(axis=1))
