"""The checkout's root is defined once (serving.checkout.REPO_ROOT); every other module imports it."""
from __future__ import annotations

import re
import subprocess

from serving.checkout import REPO_ROOT

# What computing the root again looks like: counting parents of a module's own file, or assigning REPO_ROOT.
COMPUTED = re.compile(r"Path\(__file__\)\S*\.parents\[|^\s*REPO_ROOT\s*=", re.M)
DEFINER = "serving/checkout.py"
SELF = "tests/test_checkout_root.py"


def python_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.py"], cwd=REPO_ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    return [name for name in listed if (REPO_ROOT / name).is_file()]


def recomputed(names: list[str], root=REPO_ROOT) -> list[str]:
    return [f"{name}:{(root / name).read_text()[:m.start()].count(chr(10)) + 1}"
            for name in names if name not in (DEFINER, SELF)
            for m in COMPUTED.finditer((root / name).read_text())]


def test_the_root_is_the_checkout():
    assert (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "serving" / "checkout.py").is_file()


def test_no_other_module_computes_the_root():
    assert recomputed(python_files()) == []


def test_the_check_sees_both_ways_of_computing_it(tmp_path):
    (tmp_path / "a.py").write_text("from pathlib import Path\nROOT = Path(__file__).resolve().parents[1]\n")
    (tmp_path / "b.py").write_text("import x\nREPO_ROOT = x.root()\n")
    (tmp_path / "c.py").write_text("from serving.checkout import REPO_ROOT\nMODELS = REPO_ROOT / 'models'\n")
    assert recomputed(["a.py", "b.py", "c.py"], tmp_path) == ["a.py:2", "b.py:2"]
