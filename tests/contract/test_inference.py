"""Predict, Classify and Regress answer like TF Serving, for every client (gRPC and REST, stubs and SDK)."""
from __future__ import annotations

import numpy as np
import pytest

from serving import status
from tests.support.contract.helpers import assert_outputs_match, examples_from_serialized, manifest, text


@pytest.mark.parametrize("model", ["digits", "text", "ranker"])
def test_predict_default_signature_returns_the_golden_outputs(client, endpoint, model):
    man = manifest(endpoint.repo, model)
    got = client.predict(model, man.golden_inputs())
    assert_outputs_match(got, man.golden_outputs(), man.tolerance)


def test_predict_named_signature_and_output_filter(client, endpoint):
    man = manifest(endpoint.repo, "digits")
    got = client.predict("digits", man.golden_inputs("logits"), signature="logits")
    assert_outputs_match(got, man.golden_outputs("logits"), man.tolerance)
    if client.transport == "grpc":   # REST has no output_filter
        filtered = client.predict("digits", man.golden_inputs(), output_filter=["probabilities"])
        assert list(filtered) == ["probabilities"]


@pytest.mark.parametrize("selector, version", [({"version": 1}, 1), ({"version": 2}, 2),
                                               ({"label": "stable"}, 1), ({"label": "canary"}, 2), ({}, 2)])
def test_predict_by_version_label_or_latest_reaches_that_version(client, endpoint, selector, version):
    man = manifest(endpoint.repo, "digits")
    got = client.predict("digits_versions", man.golden_inputs(), **selector)
    assert_outputs_match(got, man.golden_outputs(), man.tolerance)
    answered = getattr(client, "last_model_spec", None)   # only gRPC answers name the version
    if answered is not None:
        assert (answered.name, answered.version.value, answered.signature_name) == (
            "digits_versions", version, "serving_default")


def test_predict_single_row(client, endpoint):
    man = manifest(endpoint.repo, "digits")
    got = client.predict("digits", man.sample_inputs(batch_size=1))
    assert got["probabilities"].shape == (1, 10)


def test_classify_returns_labels_and_scores_like_the_signature(client, endpoint):
    man = manifest(endpoint.repo, "text")
    examples = examples_from_serialized(man.golden_inputs("classification")["inputs"])
    expected = man.golden_outputs("classification")
    result = client.classify("text", examples, signature="classification")
    assert len(result) == len(examples)
    labels = np.array([[label for label, _ in row] for row in result], dtype=object)
    scores = np.array([[score for _, score in row] for row in result], dtype=np.float32)
    assert (text(labels) == text(expected["classes"])).all()
    np.testing.assert_allclose(scores, expected["scores"], rtol=1e-4, atol=1e-5)


def test_regress_returns_one_value_per_example(client, endpoint):
    man = manifest(endpoint.repo, "ranker")
    examples = examples_from_serialized(man.golden_inputs("regression")["inputs"])
    values = client.regress("ranker", examples, signature="regression")
    np.testing.assert_allclose(np.array(values, dtype=np.float32), man.golden_outputs("regression")["outputs"],
                               rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ error classes


def _code(excinfo) -> status.Code:
    return excinfo.value.code


def test_unknown_model_is_not_found_with_tf_serving_message(client, endpoint):
    with pytest.raises(status.NotFound) as caught:
        client.predict("no_such_model", {"images": np.zeros((1, 8, 8, 1), np.float32)})
    assert caught.value.details == "Servable not found for request: Latest(no_such_model)"


def test_unknown_version_is_not_found_with_tf_serving_message(client, endpoint):
    with pytest.raises(status.NotFound) as caught:
        client.predict("digits", {"images": np.zeros((1, 8, 8, 1), np.float32)}, version=99)
    assert caught.value.details == "Servable not found for request: Specific(digits, 99)"


def test_unknown_label_is_invalid_argument_with_tf_serving_message(client, endpoint):
    with pytest.raises(status.InvalidArgument) as caught:
        client.predict("digits_versions", {"images": np.zeros((1, 8, 8, 1), np.float32)}, label="nope")
    assert caught.value.details == "Unrecognized servable version label: nope"


def test_unknown_signature_is_refused(client, endpoint):
    with pytest.raises(status.ServingError) as caught:
        client.predict("digits", {"images": np.zeros((1, 8, 8, 1), np.float32)}, signature="nope")
    if client.transport == "rest":   # http_rest_api_handler.cc GetInfoMap
        assert caught.value.code == status.Code.INVALID_ARGUMENT
        assert caught.value.details == 'Serving signature name: "nope" not found in signature def'
    else:                            # predict_util.cc
        assert caught.value.code == status.Code.FAILED_PRECONDITION
        assert caught.value.details == 'Serving signature key "nope" not found.'


def test_unknown_input_name_is_invalid_argument_naming_it(client, endpoint):
    with pytest.raises(status.InvalidArgument) as caught:
        client.predict("digits", {"pixels": np.zeros((1, 8, 8, 1), np.float32)})
    assert "pixels" in caught.value.details or "images" in caught.value.details


def test_missing_input_is_invalid_argument_naming_it(client, endpoint):
    man = manifest(endpoint.repo, "ranker")
    inputs = man.sample_inputs(batch_size=2)
    del inputs["item_id"]
    with pytest.raises(status.InvalidArgument) as caught:
        client.predict("ranker", inputs)
    assert "item_id" in caught.value.details


def test_a_shape_the_graph_cannot_take_is_invalid_argument(client, endpoint):
    """Shapes are not checked against the signature (TF Serving feeds them unchecked): the graph refuses
    three channels where its convolution takes one."""
    with pytest.raises(status.InvalidArgument):
        client.predict("digits", {"images": np.zeros((1, 28, 28, 3), np.float32)})


@pytest.mark.parametrize("client", ["stub-grpc", "sdk-grpc"], indirect=True)  # REST has no output_filter
def test_unknown_output_filter_is_invalid_argument(client, endpoint):
    man = manifest(endpoint.repo, "digits")
    with pytest.raises(status.InvalidArgument) as caught:
        client.predict("digits", man.sample_inputs(), output_filter=["nope"])
    assert "nope" in caught.value.details


def test_classify_on_a_predict_only_signature_is_refused(client, endpoint):
    with pytest.raises(status.InvalidArgument):
        client.classify("digits", [{"x": 1.0}], signature="serving_default")
