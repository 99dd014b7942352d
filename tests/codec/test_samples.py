"""Sample inputs without a manifest: synthesized per dtype, or read from an .npz or a REST body."""
from __future__ import annotations

import json

import numpy as np
import pytest

from serving import codec
from serving.codec import Signature, TensorSpec


def _signature(**inputs: tuple) -> Signature:
    specs = {name: TensorSpec(name, np.dtype(dtype), shape) for name, (dtype, shape) in inputs.items()}
    return Signature("serving_default", codec.PREDICT_METHOD_NAME, specs, {})


MIXED = _signature(images=(np.float32, (None, 8, 8, 1)), ids=(np.int64, (None,)),
                   mask=(np.bool_, (None, 3)), text=(object, (None,)), pixels=(np.uint8, (None, 2)))


def test_every_dtype_is_synthesized_with_the_batch_size_and_the_fixed_dimensions():
    inputs = codec.synthesize_inputs(MIXED, batch_size=4)
    assert {k: (v.dtype, v.shape) for k, v in inputs.items()} == {
        "images": (np.float32, (4, 8, 8, 1)), "ids": (np.int64, (4,)), "mask": (np.bool_, (4, 3)),
        "text": (np.dtype(object), (4,)), "pixels": (np.uint8, (4, 2))}
    assert set(np.unique(inputs["ids"])) <= {0, 1}
    assert list(inputs["text"]) == [b"sample 0", b"sample 1", b"sample 2", b"sample 3"]


def test_synthesis_is_seeded():
    first, again = codec.synthesize_inputs(MIXED, 2), codec.synthesize_inputs(MIXED, 2)
    assert np.array_equal(first["images"], again["images"])
    assert not np.array_equal(first["images"], codec.synthesize_inputs(MIXED, 2, seed=1)["images"])


def test_an_unknown_dimension_after_the_batch_is_refused_naming_the_input_and_the_flag():
    signature = _signature(tokens=(np.int32, (None, None)))
    with pytest.raises(ValueError, match=r"input 'tokens' has an unknown dimension after the batch "
                                         r"\(\[batch,\?\]\); give its dimensions after the batch with "
                                         r"--input tokens:d1"):
        codec.synthesize_inputs(signature, flag="--input")
    assert codec.synthesize_inputs(signature, 2, shapes={"tokens": (5,)})["tokens"].shape == (2, 5)


def test_an_unknown_rank_needs_a_shape():
    signature = _signature(x=(np.float32, None))
    with pytest.raises(ValueError, match="input 'x' has an unknown rank; give its dimensions after the batch"):
        codec.synthesize_inputs(signature)
    assert codec.synthesize_inputs(signature, 3, shapes={"x": ()})["x"].shape == (3,)


def test_a_shape_for_no_input_is_refused():
    with pytest.raises(ValueError, match="--shape names no input of signature 'serving_default': nope"):
        codec.synthesize_inputs(MIXED, shapes={"nope": (1,)})


@pytest.mark.parametrize("text, expected", [("images:28,28,1", ("images", (28, 28, 1))), ("x:", ("x", ())),
                                            ("a:b:3", ("a:b", (3,)))])
def test_shapes_are_parsed(text, expected):
    assert codec.parse_shape(text) == expected


@pytest.mark.parametrize("text", ["images", ":3", "x:a,b", "x:-1"])
def test_bad_shapes_are_refused_with_the_form(text):
    with pytest.raises(ValueError, match="expected NAME:d1,d2,..."):
        codec.parse_shape(text)


def test_an_npz_is_read_by_input_name(tmp_path):
    path = tmp_path / "samples.npz"
    np.savez(path, ids=np.arange(3, dtype=np.int64), images=np.zeros((3, 8, 8, 1), np.float32))
    signature = _signature(ids=(np.int64, (None,)), images=(np.float32, (None, 8, 8, 1)))
    inputs = codec.load_inputs(path, signature)
    assert inputs["ids"].tolist() == [0, 1, 2] and inputs["images"].shape == (3, 8, 8, 1)
    with pytest.raises(ValueError, match=r"inputs \['ids', 'images'\] do not match signature"):
        codec.load_inputs(path, _signature(ids=(np.int64, (None,))))


def test_a_rest_body_is_decoded_with_the_signatures_dtypes(tmp_path):
    path = tmp_path / "body.json"
    path.write_text(json.dumps({"instances": [{"ids": 3, "text": "hi"}, {"ids": 4, "text": {"b64": "aGk="}}]}))
    inputs = codec.load_inputs(path, _signature(ids=(np.int32, (None,)), text=(object, (None,))))
    assert inputs["ids"].dtype == np.int32 and inputs["ids"].tolist() == [3, 4]
    assert inputs["text"].tolist() == [b"hi", b"hi"]


def test_a_bad_rest_body_names_the_file_and_the_rule(tmp_path):
    path = tmp_path / "body.json"
    path.write_text(json.dumps({"instances": [{"ids": "x"}]}))
    with pytest.raises(ValueError, match=r"body.json: .*"):
        codec.load_inputs(path, _signature(ids=(np.int32, (None,))))
    with pytest.raises(ValueError, match="a JSON body is typed by the model's signature"):
        codec.load_inputs(path)


def test_other_files_are_refused(tmp_path):
    (tmp_path / "x.csv").write_text("1,2")
    with pytest.raises(ValueError, match=r"expected an .npz file or a TF Serving REST Predict body \(.json\)"):
        codec.load_inputs(tmp_path / "x.csv")
    with pytest.raises(ValueError, match="no such file"):
        codec.load_inputs(tmp_path / "missing.npz")
