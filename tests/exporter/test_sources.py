"""`--input NAME:DTYPE:SHAPE` and `--from PATH|module:factory`, parsed before any model is loaded."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from exporter.exportable import ExportError
from exporter.sources import InputSpec, load_from, parse_input


@pytest.mark.parametrize("text, spec", [
    ("ids:int64:16", InputSpec("ids", np.dtype(np.int64), (16,))),
    ("images:float32:28,28,1", InputSpec("images", np.dtype(np.float32), (28, 28, 1))),
    ("text:string:", InputSpec("text", np.dtype(object), ())),
    ("flag:bool:3", InputSpec("flag", np.dtype(bool), (3,))),
    ("x:double:2", InputSpec("x", np.dtype(np.float64), (2,))),
])
def test_input_flag_gives_name_dtype_and_the_dimensions_after_the_batch(text, spec):
    assert parse_input(text) == spec
    assert parse_input(spec.describe()) == spec


@pytest.mark.parametrize("text, message", [
    ("ids:int64", "expected NAME:DTYPE:SHAPE"),
    (":int64:3", "expected NAME:DTYPE:SHAPE"),
    ("ids:complex64:3", "unknown dtype 'complex64'"),
    ("ids:int64:a,b", "bad shape"),
    ("ids:int64:-1", "bad shape"),
])
def test_a_bad_input_flag_says_what_the_form_is(text, message):
    with pytest.raises(ValueError, match=message):
        parse_input(text)


def test_from_takes_an_existing_path_as_is_and_calls_a_module_factory(tmp_path):
    assert load_from(str(tmp_path)) == Path(tmp_path)
    assert load_from("tests.support.user_models:no_signatures").weight.numpy() == 1.0


@pytest.mark.parametrize("text, message", [
    ("no/such/dir", "no such file or directory, and not a module:factory name"),
    ("no_such_module_xyz:build", "cannot import module 'no_such_module_xyz'"),
    ("tests.support.user_models:missing", "has no callable 'missing'"),
])
def test_from_refuses_what_is_neither_a_path_nor_a_factory(text, message):
    with pytest.raises(ExportError, match=message):
        load_from(text)
