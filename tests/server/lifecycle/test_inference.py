"""Predict / Classify / Regress validation with TF Serving's codes and messages."""
from __future__ import annotations

import numpy as np
import pytest
from tensorflow_serving.apis import input_pb2

from serving import status
from serving.server.tensorflow import inference
from serving.server.tensorflow.loader import LoaderOptions, SavedModelLoader
from tests.support.models import example, publish

X = np.ones((2, 3), np.float32)


@pytest.fixture(scope="module")
def servable(affine_templates, tmp_path_factory):
    path = publish(affine_templates[2.0], tmp_path_factory.mktemp("inference") / "affine", 1)
    loaded = SavedModelLoader(LoaderOptions()).load("affine", 1, str(path))
    yield loaded
    loaded.close()


def examples_input(*rows, context=None):
    proto = input_pb2.Input()
    if context is None:
        for row in rows:
            proto.example_list.examples.add().CopyFrom(row)
    else:
        proto.example_list_with_context.context.CopyFrom(context)
        for row in rows:
            proto.example_list_with_context.examples.add().CopyFrom(row)
    return proto


def test_empty_signature_name_means_serving_default(servable):
    out = inference.predict(servable, "", {"x": X})
    assert set(out) == {"y", "total"}
    np.testing.assert_allclose(out["total"], [6.0, 6.0])


def test_output_filter_selects_outputs(servable):
    assert set(inference.predict(servable, None, {"x": X}, ["total"])) == {"total"}


def test_unknown_signature_is_failed_precondition_as_in_predict_util(servable):
    with pytest.raises(status.FailedPrecondition) as info:
        inference.predict(servable, "nope", {"x": X})
    assert info.value.details == 'Serving signature key "nope" not found.'


def test_rest_signature_lookup_uses_the_rest_handler_wording(servable):
    assert inference.rest_signature(servable, None).name == "serving_default"
    with pytest.raises(status.InvalidArgument) as info:
        inference.rest_signature(servable, "nope")
    assert info.value.details == 'Serving signature name: "nope" not found in signature def'


def test_extra_input_is_reported_with_the_predict_util_message(servable):
    with pytest.raises(status.InvalidArgument) as info:
        inference.predict(servable, None, {"x": X, "z": X})
    assert info.value.details == ("input size does not match signature: 2!=1 len({x,z}) != len({x})."
                                  " Sent extra: {z}. Missing but required: {}.")


def test_missing_input_is_reported_with_the_predict_util_message(servable):
    with pytest.raises(status.InvalidArgument) as info:
        inference.predict(servable, None, {})
    assert info.value.details == ("input size does not match signature: 0!=1 len({}) != len({x})."
                                  " Sent extra: {}. Missing but required: {x}.")


def test_wrongly_named_input_of_the_right_count_is_invalid_argument(servable):
    with pytest.raises(status.InvalidArgument, match="Signature input alias: x not found in request"):
        inference.predict(servable, None, {"w": X})


def test_wrong_dtype_names_the_input_and_the_expected_dtype(servable):
    with pytest.raises(status.InvalidArgument) as info:
        inference.predict(servable, None, {"x": X.astype(np.float64)})
    assert info.value.details == "Expects arg[0] to be float but double is provided"   # the Session's words


@pytest.mark.parametrize("shape", [(2, 4), (1, 3, 1)])
def test_a_shape_other_than_the_signatures_is_fed_to_the_graph_unchecked(servable, shape):
    """TF Serving feeds request tensors without checking the signature's shape (tensorflow_model_server_test.py
    testPredictREST sends [2.0, 3.0, 4.0] to half_plus_two's [-1,1] input); the graph decides."""
    outputs = inference.predict(servable, None, {"x": np.ones(shape, np.float32)})
    assert outputs["y"].shape == shape


def test_a_shape_the_graph_cannot_take_is_the_graphs_invalid_argument(servable):
    with pytest.raises(status.InvalidArgument, match="Invalid reduction dimension"):
        inference.predict(servable, None, {"x": np.ones((3,), np.float32)})


def test_unknown_and_duplicate_output_aliases_use_tf_serving_wording(servable):
    with pytest.raises(status.InvalidArgument) as info:
        inference.predict(servable, None, {"x": X}, ["nope"])
    assert info.value.details == ("output tensor alias not found in signature: nope Outputs "
                                  "expected to be in the set {total,y}.")
    with pytest.raises(status.InvalidArgument, match="^INVALID_ARGUMENT: duplicate output tensor alias: y$"):
        inference.predict(servable, None, {"x": X}, ["y", "y"])


def test_string_inputs_accept_str_and_bytes(servable):
    out = inference.predict(servable, "strings", {"s": np.array(["ab", "xyz"])})
    assert out["length"].tolist() == [2, 3]


def test_classify_builds_a_classification_result(servable):
    result = inference.classify(servable, "classification",
                                examples_input(example([1, 1, 1]), example([-1, -1, -1])))
    assert [[c.label for c in row.classes] for row in result.classifications] == [["low", "high"]] * 2
    high = [row.classes[1].score for row in result.classifications]
    assert high[0] > 0.99 and high[1] < 0.01  # scale 2: sums are +6 and -6


def test_classify_with_context_merges_context_features_into_each_example(servable):
    context = example([1, 1, 1])
    rows = [input_pb2.Input().example_list.examples.add() for _ in range(2)]  # empty examples
    result = inference.classify(servable, "classification", examples_input(*rows, context=context))
    assert len(result.classifications) == 2
    assert all(row.classes[1].score > 0.99 for row in result.classifications)


def test_regress_builds_a_regression_result(servable):
    result = inference.regress(servable, "regression",
                               examples_input(example([1, 2, 3]), example([0, 0, 1])))
    assert [r.value for r in result.regressions] == [12.0, 2.0]


def test_classify_and_regress_reject_unfit_signatures_and_empty_input(servable):
    with pytest.raises(status.InvalidArgument, match="No signature was found with the name: nope"):
        inference.classify(servable, "nope", examples_input(example([1, 2, 3])))
    with pytest.raises(status.InvalidArgument, match="Expected one output Tensor."):
        inference.regress(servable, "classification", examples_input(example([1, 2, 3])))
    with pytest.raises(status.InvalidArgument, match="No classification inputs found in SignatureDef"):
        inference.classify(servable, "serving_default", examples_input(example([1, 2, 3])))
    with pytest.raises(status.InvalidArgument, match="^INVALID_ARGUMENT: Input is empty.$"):
        inference.regress(servable, "regression", input_pb2.Input())
