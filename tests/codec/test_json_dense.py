"""Large numeric tensors parsed straight to numpy (``rest_request_loads``) decode exactly as the list path does.

The reference is the list path: ``rest_request_to_inputs(json_loads(body))``.
Every body here, clean or corrupted, must give the same tensors (dtype,
shape, every byte) or the same error message both ways. Bodies are generated
from a seeded random source (no hypothesis in this environment), several
hundred per run.
"""
from __future__ import annotations

import random
from typing import Any, Callable

import numpy as np
import pytest

from serving import codec, status
from serving.codec._json_dense import DENSE_MIN_BYTES, DenseArray
from tests.support.arrays import NUMERIC_DTYPES

TARGETS = NUMERIC_DTYPES + [object]


def outcome(body: bytes, specs: dict, loads: Callable[[bytes], Any]) -> tuple:
    """What decoding ``body`` gives: the tensors as (dtype, shape, bytes) and the format, or the error."""
    try:
        inputs, row = codec.rest_request_to_inputs(loads(body), specs)
    except status.ServingError as error:
        return ("error", error.code, error.details)
    return ("ok", row, {name: (a.dtype.str, a.shape, a.tobytes() if a.dtype != object else a.tolist())
                        for name, a in inputs.items()})


def assert_same_as_lists(body: bytes, specs: dict) -> tuple:
    reference = outcome(body, specs, codec.json_loads)
    assert outcome(body, specs, codec.rest_request_loads) == reference, body[:200]
    return reference


# -- generated bodies ------------------------------------------------------------

def number_text(rng: random.Random, kind: str) -> str:
    if kind == "int":
        return str(rng.choice([0, 1, -1, rng.randint(-300, 300), rng.randint(-2**31, 2**31),
                               rng.choice([2**24 - 1, 2**24 + 1, -2**24 - 1, 2**53 + 1, 2**63 - 1, -2**63])]))
    if kind == "bigint":
        return str(rng.choice([2**63, 2**64 - 1, 2**64, 10**30]))
    if kind == "float32":
        return repr(float(np.float32(rng.gauss(0, 3))))
    if kind == "exp":
        return rng.choice(["1e5", "1E-3", "-2.5e+10", "3.0E2", "1e39", "-1e39", "1e-320", "4.9e-324",
                           "1.7976931348623157e308", "0.0", "-0.0", "-0"])
    return repr(rng.gauss(0, 1e3))


def nested_text(rng: random.Random, shape: tuple, kinds: list[str], comma: str, open_: str, close: str) -> str:
    if not shape:
        return number_text(rng, rng.choice(kinds))
    return open_ + comma.join(nested_text(rng, shape[1:], kinds, comma, open_, close)
                              for _ in range(shape[0])) + close


SEPARATORS = [(",", "[", "]"), (", ", "[", "]"), (",\n ", "[ ", " ]"), (" ,\t", "[\r\n", "\n]")]
KINDS = [["float32"], ["float"], ["int"], ["int", "float32"], ["exp", "float"], ["int", "bigint"], ["exp", "int"]]


def random_shape(rng: random.Random) -> tuple:
    rank = rng.randint(1, 4)
    shape = [rng.randint(1, 6) for _ in range(rank)]
    shape[-1] = rng.choice([shape[-1], rng.randint(40, 200)])  # usually past DENSE_MIN_BYTES
    return tuple(shape)


def body_of(rng: random.Random, layout: str, tensors: list[str]) -> tuple[bytes, list[str]]:
    names = [f"in{i}" for i in range(len(tensors))]
    if layout == "instances":
        text = '{"instances": ' + tensors[0] + "}"
    elif layout == "inputs":
        text = '{"inputs": ' + tensors[0] + ', "signature_name": "serving_default"}'
    elif layout == "inputs-object":
        text = '{"inputs": {' + ", ".join(f'"{n}": {t}' for n, t in zip(names, tensors)) + "}}"
    else:  # instances of objects: each tensor is one instance of in0
        names = ["in0"]
        text = '{"instances": [' + ", ".join('{"in0": ' + t + "}" for t in tensors) + "]}"
    return text.encode(), names


def generated_case(seed: int) -> tuple[bytes, dict]:
    rng = random.Random(seed)
    comma, open_, close = rng.choice(SEPARATORS)
    kinds = rng.choice(KINDS)
    layout = rng.choice(["instances", "inputs", "inputs-object", "instance-objects"])
    shape = random_shape(rng)
    count = rng.randint(1, 3) if layout in ("inputs-object", "instance-objects") else 1
    shapes = [shape if rng.random() < 0.8 else random_shape(rng) for _ in range(count)]
    tensors = [nested_text(rng, s, kinds, comma, open_, close) for s in shapes]
    body, names = body_of(rng, layout, tensors)
    fitting = [np.float16, np.float32, np.float64] + ([np.int32, np.int64, np.uint64] if kinds == ["int"] else [])
    return body, {name: rng.choice(fitting if rng.random() < 0.7 else TARGETS) for name in names}


@pytest.mark.parametrize("seed", range(300))
def test_generated_bodies_decode_as_the_list_path_does(seed):
    body, specs = generated_case(seed)
    assert_same_as_lists(body, specs)


CORRUPTIONS = [
    ("9[", "["), ("]9", "]"), (",,", ","), ("[,", "["), (",]", "]"), ("01", "1"), ("1.", "1"), (".5", "5"),
    ("+1", "1"), ("-", "-"), ("1e", "1"), ("NaN", "1"), ("Infinity", "1"), ("true", "1"), ("null", "1"),
    ('"7"', "1"), ('{"b64": "AA=="}', "1"), ("[]", "[1]"), ("[1]", "1"), ("1 2", "1"), ("]", "]"), ("[", "["),
    ("[1,[2]]", "1"), ("1", "1"), ('"\\u0000dense:0:0"', "1"),
]


@pytest.mark.parametrize("seed", range(200))
def test_corrupted_bodies_fail_or_decode_as_the_list_path_does(seed):
    rng = random.Random(10_000 + seed)
    body, specs = generated_case(seed)
    text = body.decode()
    inserted, anchor = rng.choice(CORRUPTIONS)
    positions = [i for i in range(len(text)) if text.startswith(anchor, i)]
    if anchor == "1" and not positions:
        positions = [i for i, c in enumerate(text) if c.isdigit()]
    at = rng.choice(positions) if positions else len(text) // 2
    corrupted = (text[:at] + inserted + text[at + len(anchor):]).encode()
    assert_same_as_lists(corrupted, specs)


# -- the fast path is taken where it should be -------------------------------------

def image_body(layout: str, dtype=np.float32, batch: int = 1) -> bytes:
    x = np.random.default_rng(0).standard_normal((batch, 24, 24, 3)).astype(dtype)
    if layout == "instances":
        return codec.inputs_to_rest_request(x)
    if layout == "instance-objects":
        return codec.inputs_to_rest_request({"images": x})
    if layout == "inputs-object":
        return codec.inputs_to_rest_request({"images": x}, row_format=False)
    return codec.inputs_to_rest_request(x, row_format=False)


def dense_values(document: Any) -> list:
    key = "instances" if "instances" in document else "inputs"
    value = document[key]
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return [v for item in value for v in item.values()]
    return [value]


@pytest.mark.parametrize("layout", ["instances", "instance-objects", "inputs", "inputs-object"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8])
def test_image_tensors_are_parsed_to_numpy_without_lists(layout, dtype):
    body = image_body(layout, dtype, batch=2)
    assert all(isinstance(v, DenseArray) for v in dense_values(codec.rest_request_loads(body)))
    specs = {"images": np.dtype(dtype)}
    kind, row, tensors = assert_same_as_lists(body, specs)
    assert kind == "ok" and tensors["images"][:2] == (np.dtype(dtype).str, (2, 24, 24, 3))


def test_small_and_non_tensor_arrays_stay_lists():
    assert codec.rest_request_loads(b'{"instances": [[1, 2, 3]]}') == {"instances": [[1, 2, 3]]}
    long_list = "[" + ",".join(["1.5"] * DENSE_MIN_BYTES) + "]"
    document = codec.rest_request_loads(f'{{"extra": {long_list}, "instances": [{{"a": 1}}, {long_list}]}}'.encode())
    assert isinstance(document["extra"], list) and isinstance(document["instances"][1], list)
    assert isinstance(codec.rest_request_loads(f'{{"instances": [{long_list}]}}'.encode())["instances"], DenseArray)


def test_numbers_inside_a_string_are_not_taken_for_a_tensor():
    numbers = "[" + ",".join(["2.5"] * DENSE_MIN_BYTES) + "]"
    body = f'{{"signature_name": "{numbers}", "instances": [{numbers}]}}'.encode()
    assert codec.rest_request_loads(body) == codec.json_loads(body)


def test_messages_echo_a_dense_tensor_as_its_json():
    x = np.arange(600, dtype=np.int64).reshape(2, 300)
    body = b'{"instances": ' + codec.json_dumps(x.tolist()) + b', "inputs": 1}'
    with pytest.raises(status.InvalidArgument) as fast:
        codec.rest_request_to_inputs(codec.rest_request_loads(body), {"x": np.int64})
    with pytest.raises(status.InvalidArgument) as lists:
        codec.rest_request_to_inputs(codec.json_loads(body), {"x": np.int64})
    assert fast.value.details == lists.value.details
    assert fast.value.details.startswith('JSON Value: {"instances":[[0,1,2,')


def test_row_size_mismatch_between_dense_instances_is_tf_servings_message():
    first, second = np.ones((20, 20), np.float32), np.ones((20, 21), np.float32)
    body = (b'{"instances": [{"x": ' + codec.json_dumps(first) + b'}, {"x": ' + codec.json_dumps(second) + b"}]}")
    assert assert_same_as_lists(body, {"x": np.float32}) == (
        "error", status.Code.INVALID_ARGUMENT, "Failed to process element: 1 key: x of 'instances' list. "
        "Error: INVALID_ARGUMENT: Expecting tensor size: 400 but got: 420")


@pytest.mark.parametrize("defect", ["[7.5,]8.5", "9.5[,7.5]"], ids=["after-a-closer", "before-an-opener"])
def test_a_number_moved_out_of_its_slot_is_the_parse_error_it_was(defect):
    # Blanking the brackets would make a valid flat list of these; the nesting says otherwise.
    rows = ",".join(["[1.5,2.5]"] * 300)
    body = f'{{"instances": [{rows},{defect}]}}'.encode()
    kind, code, message = assert_same_as_lists(body, {"x": np.float32})
    assert kind == "error" and message.startswith("JSON Parse error")
