"""constraints.txt, the versions applications get, agrees with pyproject.toml and with the venv tests run in.

pyproject.toml holds the SDK's ranges and the applications' pins; ``make install`` and the images install
with ``pip -c constraints.txt``, so a fresh machine gets the versions a passing ``make test`` ran with, not
whatever PyPI published since (a new orjson once changed how the SDK spells ``1e20``). ``make lock``
writes the file from the venv.
"""
from __future__ import annotations

import importlib.metadata
import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from serving.checkout import REPO_ROOT



def _locked() -> dict[str, Version]:
    locked = {}
    for raw in (REPO_ROOT / "constraints.txt").read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not NAME==VERSION"
            locked[canonicalize_name(name)] = Version(version)
    return locked


def _requirements() -> list[tuple[str, Requirement]]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    found = [("dependencies", Requirement(text)) for text in project["dependencies"]]
    for extra, texts in project["optional-dependencies"].items():
        found += [(extra, Requirement(text)) for text in texts if not text.startswith("tfs-stack")]
    return [(where, req) for where, req in found if req.marker is None or req.marker.evaluate()]


# The CUDA build and what only the exporter image installs are not in a CPU venv; `make lock` cannot see them.
NOT_IN_A_CPU_VENV = {"tensorflow"}


@pytest.mark.parametrize("where,requirement", _requirements(), ids=lambda v: str(v))
def test_every_requirement_of_pyproject_is_locked_inside_its_range(where, requirement):
    name = canonicalize_name(requirement.name)
    if name in NOT_IN_A_CPU_VENV:
        pytest.skip(f"{name}: the CUDA build, installed only in the exporter image")
    locked = _locked()
    assert name in locked, f"{requirement} ({where}) has no line in constraints.txt: run make lock"
    assert requirement.specifier.contains(locked[name], prereleases=True), (
        f"constraints.txt has {name}=={locked[name]}, outside pyproject's {requirement} ({where}): run make lock")


def test_the_venv_running_the_tests_has_the_locked_versions():
    differ = []
    for name, version in _locked().items():
        try:
            installed = Version(importlib.metadata.version(name))
        except importlib.metadata.PackageNotFoundError:
            differ.append(f"{name}: locked {version}, not installed")
            continue
        if installed != version:
            differ.append(f"{name}: locked {version}, installed {installed}")
    assert not differ, "the venv is not what constraints.txt says (make install, or make lock): " + "; ".join(differ)


def test_the_images_install_with_the_constraints():
    # make install's own lines: tests/test_install_sets.py, on make's dry run.
    for dockerfile in ("deploy/images/tfserving/Dockerfile", "exporter/Dockerfile"):
        text = (REPO_ROOT / dockerfile).read_text()
        assert re.search(r"^COPY [^\n]*constraints\.txt", text, re.M), dockerfile
        installs = re.findall(r"pip install [^\n]*", text)
        # Only the project itself goes in without them (--no-deps: its dependencies are in already).
        assert all("-c constraints.txt" in line or re.search(r"--no-deps (--force-reinstall )?\.", line)
                   for line in installs), (dockerfile, installs)
