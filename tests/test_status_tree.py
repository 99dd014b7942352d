"""serving.status's exception tree is written out as classes, so IDEs and type checkers see each one."""
from __future__ import annotations

import ast
import inspect

import pytest

from serving import status
from serving.checkout import REPO_ROOT
from serving.client import errors

SUBCLASSES = [name for name in status.__all__ if name not in ("Code", "ServingError") and name[0].isupper()]


def test_every_error_class_is_a_class_statement_of_the_module():
    tree = ast.parse((REPO_ROOT / "serving" / "status.py").read_text())
    defined = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    assert set(SUBCLASSES) <= defined
    made_by_calls = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
                     and isinstance(node.func, ast.Name) and node.func.id == "type" and len(node.args) == 3]
    assert made_by_calls == []


@pytest.mark.parametrize("name", SUBCLASSES)
def test_each_class_has_its_code_a_docstring_and_the_one_parent(name):
    cls = getattr(status, name)
    assert inspect.isclass(cls) and cls.__bases__ == (status.ServingError,)
    assert cls.__module__ == "serving.status" and cls.__qualname__ == name
    assert cls.__doc__.startswith(f"{cls.code.name}: ") and len(cls.__doc__) > len(cls.code.name) + 10
    assert status.error_for(cls.code, "x").__class__ is cls
    assert getattr(errors, name) is cls   # the SDK re-exports the same classes


def test_the_sixteen_codes_besides_ok_have_one_class_each():
    assert sorted(getattr(status, name).code for name in SUBCLASSES) == [c for c in status.Code if c != status.Code.OK]


def test_except_sites_keep_catching_by_parent_and_by_class():
    with pytest.raises(status.ServingError) as caught:
        raise status.NotFound("Servable not found")
    assert isinstance(caught.value, status.NotFound) and str(caught.value) == "NOT_FOUND: Servable not found"
    assert issubclass(errors.ResponseTooLarge, status.ResourceExhausted)
