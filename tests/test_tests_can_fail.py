"""Shapes of test that cannot fail, refused across tests/.

``pytest.raises(Exception)`` passes on any error, the test's own typo included:
name the exception the code under test raises (and ``match=`` its message).
"""
from __future__ import annotations

import ast
from pathlib import Path

from tests.support.servers import REPO_ROOT

TOO_BROAD = {"Exception", "BaseException"}


def broad_raises(source: str) -> list[int]:
    """Lines of ``pytest.raises(Exception)`` / ``raises(BaseException)``, alone or in a tuple."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("pytest.raises", "raises") and node.args:
            first = node.args[0]
            names = [ast.unparse(e) for e in first.elts] if isinstance(first, ast.Tuple) else [ast.unparse(first)]
            if TOO_BROAD & set(names):
                lines.append(node.lineno)
    return lines


def test_no_test_expects_any_exception():
    found = [f"{path.relative_to(REPO_ROOT)}:{line}" for path in sorted((REPO_ROOT / "tests").rglob("*.py"))
             if path.name != Path(__file__).name for line in broad_raises(path.read_text())]
    assert found == []


def test_the_check_sees_a_broad_raises():
    assert broad_raises("with pytest.raises(Exception):\n    f()\nwith pytest.raises((ValueError, BaseException)):\n"
                        "    g()\nwith pytest.raises(ValueError, match='x'):\n    h()\n") == [1, 3]
