"""Static checks: ruff over the tree (make lint runs it and mypy before the suite; this keeps a finding failing
the suite where make lint is skipped), type hints the SDK's users can resolve, imports every install provides,
and regression tests for what the checks found."""
from __future__ import annotations

import ast
import inspect
import os
import re
import shutil
import subprocess
import sys
import tomllib
import typing
from importlib import metadata
from pathlib import Path

import pytest

from serving.checkout import REPO_ROOT
import serving.client

REPO = REPO_ROOT
VENV_BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    found = VENV_BIN / name
    if found.is_file():
        return str(found)
    on_path = shutil.which(name)
    if on_path is None:
        pytest.fail(f"{name} is not installed: it is in pyproject's dev extra (make install)")
    return on_path


# ---------------------------------------------------------------- ruff

def test_ruff_finds_nothing_with_the_projects_rules():
    """pyproject.toml's [tool.ruff] rules (bugs, not looks) hold over the whole tree, tests included."""
    run = subprocess.run([_tool("ruff"), "check", "--no-cache", "--output-format", "concise", "."],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"ruff check found:\n{run.stdout}{run.stderr}"


def test_ruff_rules_exclude_formatting_and_import_order():
    """The rule set is for bugs: a formatter or import-order rule would rewrite thousands of lines."""
    lint = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    looks = [code for code in lint["select"] if re.fullmatch(r"(I|Q|W|E[1-5]|COM|UP|D)\d*", code)]
    assert looks == [], f"formatting rules selected: {looks}"


# ---------------------------------------------------------------- mypy

def test_mypy_checks_every_module_it_reads_in_full():
    """No module is excused: an override may say a third-party package has no types, never skip our findings."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["check_untyped_defs"] is True
    silenced = [override["module"] for override in config.get("overrides", [])
                if override.get("ignore_errors") or override.get("disable_error_code")]
    assert silenced == [], f"modules whose mypy findings are not reported: {silenced}"


# ---------------------------------------------------------------- the SDK's type hints

def _public_callables():
    for name in serving.client.__all__:
        obj = getattr(serving.client, name)
        if inspect.ismodule(obj):
            objs = [getattr(obj, n) for n in obj.__all__]
        else:
            objs = [obj]
        for given in objs:
            # a constant (NO_RETRY): its class's annotations
            item = given if inspect.isclass(given) or inspect.isfunction(given) else type(given)
            yield f"{name}: {item.__qualname__}", item
            if inspect.isclass(item):
                for attr, value in inspect.getmembers(item):
                    member = value.fget if isinstance(value, property) else value
                    if inspect.isfunction(member) and (not attr.startswith("_") or attr == "__init__"):
                        yield f"{name}: {member.__qualname__}", member


def test_every_public_sdk_annotation_resolves():
    """typing.get_type_hints works on every class, method and function of serving.client's __all__: an
    application that resolves the SDK's annotations (pydantic, FastAPI, typeguard, a dataclass tool) gets
    types, not a NameError (the classify/regress `context` was annotated with an unimported `codec`)."""
    failures = []
    for where, obj in _public_callables():
        try:
            typing.get_type_hints(obj)
        except Exception as exc:  # noqa: BLE001 - every failure is collected and listed
            failures.append(f"{where}: {exc!r}")
    assert failures == [], "\n".join(failures)


def test_public_sdk_annotations_name_the_real_types():
    hints = typing.get_type_hints(serving.client.GrpcClient.classify)
    assert "Mapping[str" in str(hints["context"])


# ---------------------------------------------------------------- regression tests for what ruff found

def test_a_load_run_past_its_bound_is_stopped_not_a_name_error(tmp_path):
    """loadtest.runner._run_bounded called an unimported stop_process when locust overran (pyflakes F821):
    the run died with NameError instead of stopping the process group and reporting the timeout."""
    from loadtest.runner import _run_bounded

    code, timed_out = _run_bounded([sys.executable, "-c", "import time; time.sleep(600)"],
                                   tmp_path / "run.log", 0.2)
    assert timed_out is True
    assert code != 0


# ---------------------------------------------------------------- imports every install provides

# Where each product folder runs, and so which requirements provide its imports: the SDK's base for the library
# (a `pip install tfs-stack` into any app), an extra for the rest. First match wins.
INSTALLS = [
    # (path prefix, extras (None: nothing beyond the standard library), what installs it)
    ("serving/client/", [], "the SDK: pip install tfs-stack"),
    ("serving/codec/", [], "the SDK: pip install tfs-stack"),
    ("serving/wire/", [], "the SDK: pip install tfs-stack"),
    ("serving/status.py", [], "the SDK: pip install tfs-stack"),
    ("serving/__init__.py", [], "the SDK: pip install tfs-stack"),
    # The gateway's capture service: its image installs the server's dependencies (deploy/images/capture).
    ("serving/capture/gateway_sink.py", ["server-core", "capture"], "the capture service's image"),
    ("serving/capture/", ["capture"], "pip install tfs-stack[capture]"),
    ("serving/", ["stack"], "make up (the stack extra)"),
    ("exporter/", ["exporter"], "pip install tfs-stack[exporter] (make up: the stack extra)"),
    ("loadtest/", ["loadtest"], "pip install tfs-stack[loadtest]"),
    ("benchmarks/", ["dev"], "make bench (the dev extra)"),
    ("deploy/", ["stack", "loadtest"], "make images (make up's install)"),
    ("monitoring/", ["stack", "loadtest"], "make monitor (make up's install)"),
    ("gateway/", None, "make certs: the system python3, no venv"),
]
# The peers' apps run in virtual environments of their own (benchmarks/peers/envs.py), never in ours.
NOT_OURS = ("benchmarks/peer_apps/",)
FIRST_PARTY = {"serving", "exporter", "loadtest", "benchmarks", "deploy", "gateway", "monitoring", "tests"}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(extras: list[str]) -> list[str]:
    """The requirement strings of the base and ``extras`` (self-references ``tfs-stack[x]`` followed), plus
    the tensorflow-serving-api that the Makefile installs --no-deps beside the stack (pyproject's tf-gpu pin)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    found, todo, seen = list(project["dependencies"]), list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in project["optional-dependencies"][extra]:
            nested = re.fullmatch(r"tfs-stack\[([^\]]+)\]", requirement)
            if nested:
                todo.extend(e.strip() for e in nested.group(1).split(","))
            else:
                found.append(requirement)
    if "stack" in seen or "exporter" in seen:
        makefile = (REPO / "Makefile").read_text()
        assert "SERVING_API := $(shell grep -o 'tensorflow-serving-api==" in makefile
        found.append("tensorflow-serving-api")
    return found


def _provided_modules(requirements: list[str], *, transitive: bool) -> set[str]:
    """Top-level modules the installed distributions of ``requirements`` provide (and, with ``transitive``,
    those of what they require: an application pins its requirements, which fixes what they pull in)."""
    from packaging.requirements import Requirement

    by_dist: dict[str, set[str]] = {}
    for module, dists in metadata.packages_distributions().items():
        for dist in dists:
            by_dist.setdefault(_canonical(dist), set()).add(module)
    names, todo = set(), [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = _canonical(req.name)
        if name in names:
            continue
        names.add(name)
        if transitive:
            try:
                todo.extend(Requirement(r) for r in metadata.requires(req.name) or [])
            except metadata.PackageNotFoundError:
                pass
    modules = set().union(*(by_dist.get(n, set()) for n in names))
    # The CPU build of the tf extra provides the same module as the `tensorflow` wheel.
    return modules | ({"tensorflow"} if "tensorflow-cpu" in names else set())


def _third_party_imports(path: Path) -> set[str]:
    """Top-level modules ``path`` imports that are neither the standard library nor this project's, wherever
    in the file (function-local imports too); an import guarded by ``except ImportError`` is optional."""
    tree = ast.parse(path.read_text(), str(path))
    optional = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers):
            optional.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found = set()
    for node in ast.walk(tree):
        if id(node) in optional:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in FIRST_PARTY:
                found.add(top)
    return found


def _undeclared(prefix: str, extras: list[str] | None) -> list[str]:
    if extras is None:
        provided: set[str] = set()
    else:
        provided = _provided_modules(_requirements(extras), transitive=bool(extras))
    claimed = [p for p, _, _ in INSTALLS[:[p for p, _, _ in INSTALLS].index(prefix)]]
    problems = []
    for path in sorted((REPO / prefix.split("/")[0]).rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if (not rel.startswith(prefix) or rel.startswith(NOT_OURS) or path.name.endswith("_pb2.py")
                or any(rel.startswith(p) for p in claimed)):
            continue
        problems += [f"{rel} imports {module}" for module in sorted(_third_party_imports(path) - provided)]
    return problems


@pytest.mark.parametrize("prefix, extras, where", [pytest.param(*row, id=row[0].strip("/")) for row in INSTALLS])
def test_every_import_is_provided_by_the_install_that_runs_it(prefix, extras, where):
    """Each third-party module a product file imports comes from a requirement its install declares: for the
    SDK (a library with ranges) a direct requirement; for an application (pinned), one or what it pulls in."""
    assert _undeclared(prefix, extras) == [], f"not declared for {where}"


def test_the_psutil_the_load_tools_import_is_declared_and_docker_is_not():
    """psutil (loadtest/procfs.py, benchmarks/loadgen.py) is in the loadtest extra; the docker SDK, never
    imported (compose runs through the CLI), is in no extra."""
    assert "psutil" in _provided_modules(_requirements(["loadtest"]), transitive=False)
    assert "psutil" in _third_party_imports(REPO / "loadtest/procfs.py")
    text = (REPO / "pyproject.toml").read_text()
    assert not re.search(r'"docker[=<>~ ]', text)
    files = [p for folder in (*FIRST_PARTY, "examples") for p in (REPO / folder).rglob("*.py")]
    assert [p for p in files if "docker" in _third_party_imports(p)] == []


@pytest.mark.slow   # mypy reads numpy's and the SDK's types from scratch (seconds)
def test_an_applications_type_checker_sees_the_sdks_types(tmp_path):
    """An application's mypy sees what the clients return, awaited for the async ones, through `with`: the
    async clients' methods were typed with the sync return values and `with` gave Any."""
    app = tmp_path / "app.py"
    app.write_text(
        "from serving.client import AsyncGrpcClient, GrpcClient, RestClient\n"
        "async def main() -> None:\n"
        "    async with AsyncGrpcClient('localhost:1') as client:\n"
        "        reveal_type(await client.predict('m', [1.0]))\n"
        "        reveal_type(await client.status('m'))\n"
        "def sync() -> None:\n"
        "    with RestClient('http://localhost:1') as rest, GrpcClient('localhost:1') as grpc_client:\n"
        "        reveal_type(rest.regress('m', [{'x': 1.0}]))\n"
        "        reveal_type(grpc_client.metadata('m'))\n")
    run = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--ignore-missing-imports",
                          "--follow-imports=silent", "--cache-dir", str(tmp_path / "cache"), str(app)],
                         cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "MYPYPATH": str(REPO)})
    revealed = re.findall(r'Revealed type is "([^"]+)"', run.stdout)
    assert revealed == ["dict[str, numpy.ndarray[Any, Any]]", "list[serving.codec._metadata.VersionStatus]",
                        "numpy.ndarray[Any, Any]", "serving.codec._metadata.ModelMetadata"], run.stdout
