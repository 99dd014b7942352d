"""tf.Example <-> dict, and the REST Classify/Regress bodies."""
from __future__ import annotations

import numpy as np
import pytest
from tensorflow.core.example import example_pb2
from tensorflow_serving.apis import classification_pb2, input_pb2, regression_pb2

from serving import codec, status
from serving.wire import apis


def _official(features: dict) -> example_pb2.Example:
    example = example_pb2.Example()
    for name, (kind, values) in features.items():
        getattr(example.features.feature[name], kind).value.extend(values)
    return example


def test_python_values_map_to_feature_kinds_like_tf_serving():
    example = codec.example_from_dict(
        {"f": 1.5, "fl": [0.5, 2.0], "i": 3, "il": [1, 2], "flag": True, "s": "h\u00e9", "b": b"\xff",
         "b64": {"b64": "AAE="}, "empty": []}, example_pb2.Example())
    expected = _official({
        "f": ("float_list", [1.5]), "fl": ("float_list", [0.5, 2.0]), "i": ("int64_list", [3]),
        "il": ("int64_list", [1, 2]), "flag": ("int64_list", [1]), "s": ("bytes_list", ["h\u00e9".encode()]),
        "b": ("bytes_list", [b"\xff"]), "b64": ("bytes_list", [b"\x00\x01"])})
    # An empty list is a feature of no kind: present, with none of the three lists set.
    assert "empty" in example.features.feature
    assert example.features.feature["empty"].WhichOneof("kind") is None
    expected.features.feature["empty"].SetInParent()
    assert example == expected


def test_numpy_arrays_map_by_dtype():
    example = codec.example_from_dict({"f": np.array([[0.25, 1.0]], np.float64), "i": np.arange(3, dtype=np.uint8),
                                       "s": np.array([b"a", b"b"])}, example_pb2.Example())
    assert codec.example_to_dict(example) == {"f": [0.25, 1.0], "i": [0, 1, 2], "s": [b"a", b"b"]}


def test_wire_and_official_examples_serialize_identically():
    features = {"text": "good movie", "ids": [4, 5], "w": [0.5]}
    ours = codec.example_from_dict(features, apis.Example())
    official = codec.example_from_dict(features, example_pb2.Example())
    assert example_pb2.Example.FromString(ours.SerializeToString()) == official
    assert codec.example_to_dict(ours) == codec.example_to_dict(official) == {
        "text": [b"good movie"], "ids": [4, 5], "w": [0.5]}


@pytest.mark.parametrize("features,message", [
    ({"x": None}, "Feature: x has element with unexpected JSON type: Null"),
    ({"x": [[1]]}, "Feature: x has element with unexpected JSON type: Array"),
    ({"x": {"a": 1}}, "Feature: x has element with unexpected JSON type: Object"),
    ({"x": [1, 2.5]}, "Unexpected element type in feature: x expecting type: int64"),
    ({"x": ["a", 1]}, "Unexpected element type in feature: x expecting type: bytes"),
    ({"x": 2 ** 63}, "Feature: x has uint64_t element. Only int64_t is supported."),
])
def test_bad_feature_values_are_invalid_argument(features, message):
    with pytest.raises(status.InvalidArgument, match=message):
        codec.example_from_dict(features, example_pb2.Example())


def test_rest_classify_body_round_trips_into_an_official_input():
    body = codec.examples_to_rest_request([{"text": b"\xffraw", "n": 2}, {"text": "fine", "n": [3, 4]}],
                                          context={"lang": "en"}, signature_name="classification")
    doc = codec.json_loads(body)
    assert doc["signature_name"] == "classification"
    request_input = codec.rest_request_to_input(doc, input_pb2.Input())
    assert request_input.WhichOneof("kind") == "example_list_with_context"
    listed = request_input.example_list_with_context
    assert codec.example_to_dict(listed.context) == {"lang": [b"en"]}
    assert [codec.example_to_dict(e) for e in listed.examples] == [
        {"text": [b"\xffraw"], "n": [2]}, {"text": [b"fine"], "n": [3, 4]}]


def test_rest_input_without_context_uses_example_list():
    request_input = codec.rest_request_to_input({"examples": [{"x": 1.5}]}, input_pb2.Input())
    assert request_input.WhichOneof("kind") == "example_list"


@pytest.mark.parametrize("doc,message", [
    ({}, "When method is classify, key 'examples' is expected and was not found"),
    ({"examples": 1}, "Expecting 'examples' value to be an list/array"),
    ({"examples": []}, "'examples' value is an empty array"),
    ({"examples": [[1]]}, "Example must be JSON object but got JSON Array"),
])
def test_rest_classify_body_errors(doc, message):
    with pytest.raises(status.InvalidArgument, match=message):
        codec.rest_request_to_input(doc, input_pb2.Input())


def test_classification_results_have_tf_serving_shape_and_match_grpc_values():
    result = classification_pb2.ClassificationResult()
    item = result.classifications.add()
    item.classes.add(label="pos", score=0.1)
    item.classes.add(label="neg", score=0.9)
    body = codec.classification_result_to_rest(result)
    assert body == b'{"results":[[["pos",0.1],["neg",0.9]]]}'
    assert codec.rest_response_to_results(body, method="classify") == codec.classification_result_to_list(result)


def test_regression_results_have_tf_serving_shape_and_match_grpc_values():
    result = regression_pb2.RegressionResult()
    result.regressions.add(value=42.0)
    result.regressions.add(value=0.5)
    body = codec.regression_result_to_rest(result)
    assert body == b'{"results":[42.0,0.5]}'
    back = codec.rest_response_to_results(body, method="regress")
    np.testing.assert_array_equal(back, codec.regression_result_to_array(result))
    assert back.dtype == np.float32


@pytest.mark.parametrize("parsed", [[1, 2], 5, None], ids=["list", "number", "null"])
def test_parsed_response_that_is_not_an_object_has_no_results(parsed):
    """A parsed body that is not an object is named so (it was parsed as text again: AttributeError, "empty")."""
    with pytest.raises(status.InvalidArgument, match="response has no 'results'"):
        codec.rest_response_to_results(parsed, method="classify")


@pytest.mark.parametrize("results", [5, [5], [[5]], [[["a", 0.5, 1]]], [[["a", [0.5]]]], {"a": "b"}],
                         ids=["number", "example", "pair", "triple", "list-score", "object"])
def test_classify_results_not_label_score_pairs_are_invalid_argument(results):
    """Each example of a Classify body is a list of [label, score] pairs (else TypeError or ValueError escaped)."""
    with pytest.raises(status.InvalidArgument, match=r"'results' are not \[label, score\] pairs per example"):
        codec.rest_response_to_results({"results": results}, method="classify")


def test_empty_results_are_rejected_with_tf_serving_messages():
    with pytest.raises(status.InvalidArgument, match="Cannot convert empty ClassificationResults to JSON"):
        codec.classification_result_to_rest(classification_pb2.ClassificationResult())
    with pytest.raises(status.InvalidArgument, match="Cannot convert empty RegressionResults to JSON"):
        codec.regression_result_to_rest(regression_pb2.RegressionResult())
