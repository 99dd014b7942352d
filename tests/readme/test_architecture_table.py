"""docs/architecture.md's Folders table matches the tree.

Every module the table names exists; every module of ``serving/`` (each ``.py``
file and sub-package of a ``serving/`` folder, ``__init__`` and ``__main__``
aside) is named in its folder's row. Rows outside ``serving/`` are held only to
the first half: they describe folders (``loadtest/``, ``benchmarks/``) by
what they do and name their main modules, anywhere below the folder.
"""
from __future__ import annotations

import re
from pathlib import Path

from serving.checkout import REPO_ROOT


PAGE = REPO_ROOT / "docs" / "architecture.md"
ROW = re.compile(r"^\| `([\w/]+/)` \| (.*) \|$", re.M)
# A module as the table spells it: `name`, `_name`, `name/` (a package) or `name.py` (a script).
MODULE = re.compile(r"`(_?[a-z][a-z0-9_]*(?:/|\.py)?)`")
# Modules that other branches add at the same time as this table names them: tolerated while missing, so this
# branch passes alone; once merged they exist and this set is inert (delete it then).
def table(text: str) -> dict[str, set[str]]:
    """``{folder: names of the modules its row names}``."""
    return {folder: set(MODULE.findall(body)) for folder, body in ROW.findall(text)}


def _module_paths(folder: Path, name: str, recursive: bool) -> list[Path]:
    stem = name.rstrip("/").removesuffix(".py")
    pattern = "**/" if recursive else ""
    return [*folder.glob(f"{pattern}{stem}.py"), *(p for p in folder.glob(f"{pattern}{stem}") if p.is_dir())]


def missing_modules(rows: dict[str, set[str]], root: Path) -> list[str]:
    missing = []
    for folder, names in rows.items():
        for name in names:
            if not _module_paths(root / folder, name, recursive=not folder.startswith("serving/")):
                missing.append(f"{folder}{name}")
    return sorted(missing)


def unnamed_modules(rows: dict[str, set[str]], root: Path) -> list[str]:
    """Modules of serving/ folders that their row does not name (a sub-package with a row of its own is named)."""
    unnamed = []
    for folder, names in rows.items():
        if not folder.startswith("serving/"):
            continue
        stems = {name.rstrip("/").removesuffix(".py") for name in names}
        for path in sorted((root / folder).iterdir()):
            if path.suffix == ".py" and path.stem not in ("__init__", "__main__"):
                stem = path.stem
            elif path.is_dir() and (path / "__init__.py").is_file():
                stem = path.name
                if f"{folder}{stem}/" in rows:
                    continue
            else:
                continue
            if stem not in stems:
                unnamed.append(f"{folder}{stem}")
    return unnamed


def test_every_module_the_table_names_exists():
    assert missing_modules(table(PAGE.read_text()), REPO_ROOT) == []


def test_every_serving_module_is_named_in_its_folders_row():
    assert unnamed_modules(table(PAGE.read_text()), REPO_ROOT) == []


def test_every_serving_package_has_a_row():
    rows = table(PAGE.read_text())
    packages = {f"{p.parent.relative_to(REPO_ROOT)}/" for p in (REPO_ROOT / "serving").rglob("__init__.py")}
    assert sorted(packages - set(rows)) == []


def test_the_checks_catch_a_missing_and_an_unnamed_module(tmp_path):
    (tmp_path / "serving" / "pkg").mkdir(parents=True)
    for name in ("__init__.py", "kept.py", "forgotten.py"):
        (tmp_path / "serving" / "pkg" / name).write_text("")
    rows = table("| `serving/pkg/` | `kept`, `gone` (removed), `stack.json`, `make up` |\n")
    assert rows == {"serving/pkg/": {"kept", "gone"}}
    assert missing_modules(rows, tmp_path) == ["serving/pkg/gone"]
    assert unnamed_modules(rows, tmp_path) == ["serving/pkg/forgotten"]
