"""Static checks: ruff over the tree (make lint runs it and mypy before the suite; this keeps a finding failing
the suite where make lint is skipped), type hints the SDK's users can resolve, imports every install provides,
and regression tests for what the checks found."""
from __future__ import annotations

import ast
import inspect
import re
import shutil
import subprocess
import sys
import tomllib
import typing
from importlib import metadata
from pathlib import Path

import pytest

import serving.client

REPO = Path(__file__).resolve().parents[1]
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


# ---------------------------------------------------------------- the SDK's type hints

def _public_callables():
    for name in serving.client.__all__:
        obj = getattr(serving.client, name)
        if inspect.ismodule(obj):
            objs = [getattr(obj, n) for n in obj.__all__]
        else:
            objs = [obj]
        for item in objs:
            if not (inspect.isclass(item) or inspect.isfunction(item)):
                item = type(item)  # a constant (NO_RETRY): its class's annotations
            yield f"{name}: {item.__qualname__}", item
            if inspect.isclass(item):
                for attr, member in inspect.getmembers(item):
                    if isinstance(member, property):
                        member = member.fget
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
