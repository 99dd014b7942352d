"""`--input NAME:DTYPE:SHAPE` and `--from PATH|module:factory`, parsed before any model is loaded."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from exporter.exportable import ExportError
from exporter.sources import describe_input, load_from, parse_input, prepare
from serving.codec import TensorSpec


@pytest.mark.parametrize("text, spec", [
    ("ids:int64:16", TensorSpec("ids", np.dtype(np.int64), (None, 16))),
    ("images:float32:28,28,1", TensorSpec("images", np.dtype(np.float32), (None, 28, 28, 1))),
    ("text:string:", TensorSpec("text", np.dtype(object), (None,))),
    ("flag:bool:3", TensorSpec("flag", np.dtype(bool), (None, 3))),
    ("x:double:2", TensorSpec("x", np.dtype(np.float64), (None, 2))),
])
def test_input_flag_gives_name_dtype_and_the_dimensions_after_the_batch(text, spec):
    assert parse_input(text) == spec
    assert parse_input(describe_input(spec)) == spec


def test_an_input_of_unknown_rank_has_no_input_flag_form_and_says_so():
    with pytest.raises(ValueError, match="input 'ids' has an unknown rank"):
        describe_input(TensorSpec("ids", np.dtype(np.int64), None))


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


@pytest.mark.parametrize("spec", [TensorSpec("ids", np.int64, (16,)), TensorSpec("ids", np.int64, None),
                                  TensorSpec("ids", np.int64, ())])
def test_an_input_tensor_spec_must_start_with_the_batch_dimension(spec):
    """Checked before any model is looked at (so no model is needed here)."""
    with pytest.raises(ExportError, match=r"input 'ids': a TensorSpec's shape starts with the batch dimension"):
        prepare(None, inputs=[spec])


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
