"""grpcio's private names are read in one module, which checks the installed grpcio against the pin."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
import types


from serving.checkout import REPO_ROOT
from serving.server.frontends import grpcio_internals

ADAPTER = "serving/server/frontends/grpcio_internals.py"
PRIVATE = re.compile(r"^grpc\._")


def _private_grpc_imports(path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [name for name in names if PRIVATE.match(name)]
    return found


def test_only_the_adapter_imports_grpcio_private_modules():
    users = {path.relative_to(REPO_ROOT).as_posix() for top in ("serving", "loadtest", "benchmarks", "exporter")
             for path in (REPO_ROOT / top).rglob("*.py") if _private_grpc_imports(path)}
    assert users == {ADAPTER}


def test_the_adapter_pins_what_the_server_extra_pins():
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert f"grpcio=={grpcio_internals.PINNED_GRPCIO}" in extras["server-core"]


def test_the_pinned_version_is_installed_and_supported():
    assert grpcio_internals.version_mismatch(grpcio_internals.INSTALLED_GRPCIO) is None
    assert grpcio_internals.missing_names() == []
    assert grpcio_internals.SUPPORTED


def test_another_version_is_named_with_the_pin_the_fix_and_the_fallback():
    message = grpcio_internals.version_mismatch("1.99.0", "1.85.3")
    assert "grpcio 1.99.0 is installed" in message
    assert "grpcio==1.85.3" in message
    assert "pip install" in message and "falls back to grpcio's own admission" in message


def test_a_grpcio_without_the_private_names_is_not_supported():
    assert grpcio_internals.missing_names(None, None) == ["grpc._server", "grpc._cython.cygrpc"]
    server = types.SimpleNamespace(_abort=None)
    missing = grpcio_internals.missing_names(server, types.SimpleNamespace())
    assert "grpc._server._receive_message" in missing and "grpc._server._abort" not in missing
    assert "grpc._cython.cygrpc.ReceiveMessageOperation" in missing


def test_importing_with_another_grpcio_warns_at_import():
    code = ("import warnings, grpc; grpc.__version__ = '1.99.0'; warnings.simplefilter('always')\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    import serving.server.frontends.grpcio_internals as m\n"
            "print(m.SUPPORTED, [str(w.message) for w in caught if w.category is RuntimeWarning])")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('True ["grpcio 1.99.0 is installed'), result.stdout


def test_without_the_private_names_the_front_end_serves_with_grpcios_own_admission(dataplane, monkeypatch, caplog):
    from serving.client import GrpcClient
    from serving.server.frontends.grpc import GrpcFrontend
    from serving.server.frontends.grpc_admission import FallbackExecutor

    monkeypatch.setattr(grpcio_internals, "SUPPORTED", False)
    frontend = GrpcFrontend(dataplane, ["127.0.0.1:0"], max_threads=2, max_concurrent_rpcs=4)
    frontend.start()
    try:
        assert isinstance(frontend._executor, FallbackExecutor)
        with GrpcClient(f"127.0.0.1:{frontend.bound_ports[0]}") as client:
            assert [v.version for v in client.status("tiny")] == [1]
    finally:
        frontend.stop(grace=1)
    assert "gRPC admission falls back to grpcio's own" in caplog.text
