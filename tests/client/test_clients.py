"""GrpcClient and RestClient against real servers: same calls, same answers."""
from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from serving.client import GrpcClient, ModelMetadata, RestClient, RetryPolicy, TensorSpec, VersionStatus, errors

FAST = RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.05)


@pytest.fixture(params=["grpc", "rest"])
def client(request, grpc_target, rest_url):
    made = GrpcClient(grpc_target, retry=FAST) if request.param == "grpc" else RestClient(rest_url, retry=FAST)
    with made:
        yield made


@pytest.fixture
def both(grpc_target, rest_url):
    with GrpcClient(grpc_target, retry=FAST) as grpc_client, RestClient(rest_url, retry=FAST) as rest_client:
        yield grpc_client, rest_client


def _multi_inputs():
    return {"ids": np.array([1, 2, 3], np.int64), "weights": np.arange(9, dtype=np.float32).reshape(3, 3) / 4,
            "text": np.array([b"a", b"\xff\x01", "h\u00e9".encode()], dtype=object)}


def test_predict_gives_equal_arrays_and_dtypes_over_grpc_and_rest(both):
    results = [c.predict("multi", _multi_inputs()) for c in both]
    grpc_out, rest_out = results
    assert set(grpc_out) == set(rest_out) == {"score", "ids_out", "echo_bytes", "flags", "narrow", "nan_inf"}
    for name, value in grpc_out.items():
        assert rest_out[name].dtype == value.dtype, name
        np.testing.assert_array_equal(rest_out[name], value)
    assert grpc_out["echo_bytes"].tolist() == _multi_inputs()["text"].tolist()
    assert grpc_out["narrow"].dtype == np.int8 and grpc_out["flags"].dtype == np.bool_
    assert np.isnan(rest_out["nan_inf"][0]) and rest_out["nan_inf"][1] == np.inf


def test_a_float16_output_comes_over_grpc_and_fails_over_rest_as_in_tf_serving(both):
    """json_tensor.cc (2.17.1) AddSingleValueAndAdvance has no DT_HALF case: REST answers 400 with its message."""
    grpc_client, rest_client = both
    out = grpc_client.predict("half", np.array([1.5, -2.0], np.float32))
    assert out["y"].dtype == np.float16 and out["y"].tolist() == [1.5, -2.0]
    with pytest.raises(errors.InvalidArgument, match="Failed to write JSON value for tensor type: half"):
        rest_client.predict("half", np.array([1.5], np.float32))


def test_predict_with_a_bare_array_uses_the_only_input(client):
    images = np.random.default_rng(0).random((4, 8, 8, 1), dtype=np.float32)
    outputs = client.predict("digits", images)
    assert outputs["probabilities"].shape == (4, 10) and outputs["probabilities"].dtype == np.float32
    np.testing.assert_allclose(outputs["probabilities"].sum(axis=1), 1.0, rtol=1e-5)


def test_python_lists_take_the_signature_dtypes_over_both(both):
    inputs = {"ids": [1, 2], "weights": [[0.5, 1, 2], [0, 0, 0]], "text": ["a", b"\xff"]}
    grpc_out, rest_out = (c.predict("multi", inputs) for c in both)
    for name, value in grpc_out.items():
        assert rest_out[name].dtype == value.dtype
        np.testing.assert_array_equal(rest_out[name], value)
    assert grpc_out["ids_out"].tolist() == [2, 4] and grpc_out["echo_bytes"].tolist() == [b"a", b"\xff"]
    for client in both:
        with pytest.raises(errors.InvalidArgument, match='input "ids": cannot cast DT_DOUBLE to DT_INT64: 1.5 is'):
            client.predict("multi", {**inputs, "ids": [1.5, 2]})


def test_predict_output_filter_returns_only_named_outputs(client):
    outputs = client.predict("digits", {"images": np.ones((1, 8, 8, 1), np.float32)}, output_filter=["logits"])
    assert list(outputs) == ["logits"]


def test_grpc_request_carries_version_label_signature_and_filter(grpc_target, backend):
    with GrpcClient(grpc_target) as client:
        client.predict("digits", np.ones((1, 8, 8, 1), np.float32), version=2, signature="serving_default",
                       output_filter=["probabilities"])
        client.predict("digits", np.ones((1, 8, 8, 1), np.float32), label="stable")
    versioned, labelled = [r for r in backend.requests if r.model_spec.name == "digits"][-2:]
    assert versioned.model_spec.version.value == 2 and versioned.model_spec.signature_name == "serving_default"
    assert list(versioned.output_filter) == ["probabilities"]
    assert labelled.model_spec.version_label == "stable" and not labelled.model_spec.HasField("version")


@pytest.mark.parametrize("where,message", [
    ({"version": 9}, "Servable not found for request: Specific(digits, 9)"),
    ({"label": "nope"}, "Unrecognized servable version label: nope"),
])
def test_unknown_version_or_label_raise_tf_serving_errors(client, where, message):
    with pytest.raises(errors.ServingError) as info:
        client.predict("digits", {"images": np.ones((1, 8, 8, 1), np.float32)}, **where)
    assert info.value.details == message


def test_unknown_model_is_not_found_over_both(both):
    for c in both:
        with pytest.raises(errors.NotFound, match=r"Servable not found for request: Latest\(ghost\)"):
            c.predict("ghost", {"x": np.ones(1, np.float32)})


def test_float64_is_cast_and_a_string_refused_before_sending_over_both(both, backend):
    float64 = {"images": np.ones((1, 8, 8, 1), np.float64)}
    grpc_out, rest_out = (c.predict("digits", float64) for c in both)
    np.testing.assert_array_equal(grpc_out["probabilities"], rest_out["probabilities"])
    sent = backend.calls["predict"]
    for client in both:
        with pytest.raises(errors.InvalidArgument, match='input "images": cannot cast DT_STRING to DT_FLOAT: '
                                                         "'x' is a string, not a number"):
            client.predict("digits", {"images": [[["x"] * 1] * 8] * 8})
    assert backend.calls["predict"] == sent  # refused in the SDK: nothing reached the server


def test_metadata_is_equal_over_both(both):
    grpc_meta, rest_meta = (c.metadata("digits", version=2) for c in both)  # unlabeled gRPC names `stable`
    assert isinstance(grpc_meta, ModelMetadata) and grpc_meta == rest_meta
    sig = grpc_meta.signatures["serving_default"]
    assert grpc_meta.version == 2 and sig.method_name == "tensorflow/serving/predict"
    assert sig.inputs["images"] == TensorSpec("images", np.dtype(np.float32), (None, 8, 8, 1),
                                              "serving_default_images:0")


def test_status_lists_versions_and_errors_equally_over_both(both):
    grpc_status, rest_status = (c.status("digits") for c in both)
    assert grpc_status == rest_status == [
        VersionStatus(1, "AVAILABLE", errors.Code.OK, ""), VersionStatus(2, "AVAILABLE", errors.Code.OK, ""),
        VersionStatus(3, "END", errors.Code.NOT_FOUND, "Failed to load")]
    assert [c.status("digits", version=1) for c in both] == [[VersionStatus(1, "AVAILABLE", errors.Code.OK, "")]] * 2


def test_classify_and_regress_build_examples_from_dicts_over_both(both, backend):
    examples = [{"text": "great"}, {"text": b"\xffmeh stuff!"}]
    classes = [c.classify("text", examples, signature="classification") for c in both]
    assert classes[0] == classes[1]
    assert classes[0][0] == [("pos", pytest.approx(0.5)), ("neg", pytest.approx(0.5))]
    values = [c.regress("text", [{"x": [1.5, 2.0]}, {"x": 4.0}], signature="regression", context={"c": 1})
              for c in both]
    np.testing.assert_array_equal(values[0], values[1])
    np.testing.assert_array_equal(values[0], np.array([3.5, 4.0], np.float32))


def test_grpc_reload_config_sends_the_config_from_text_or_official_message(grpc_target, backend):
    text = 'model_config_list { config { name: "digits" base_path: "/models/digits" model_platform: "tensorflow" ' \
           'model_version_policy { specific { versions: 1 } } version_labels { key: "stable" value: 1 } } }'
    official = model_server_config_pb2.ModelServerConfig()
    official.model_config_list.config.add(name="echo", base_path="/models/echo", model_platform="tensorflow")
    with GrpcClient(grpc_target) as client:
        assert client.reload_config(text) is None
        client.reload_config(official)
    sent_text, sent_official = backend.reload_configs
    expected = model_server_config_pb2.ModelServerConfig()
    text_format.Parse(text, expected)
    assert sent_text == expected and sent_official == official


def test_grpc_reload_config_failure_raises_the_server_error(grpc_target, backend):
    with GrpcClient(grpc_target) as client, pytest.raises(errors.FailedPrecondition, match="unavailable version"):
        client.reload_config('model_config_list { config { name: "bad" base_path: "/x" } }')


def test_rest_reload_config_is_unimplemented_without_a_request(rest_url, backend):
    with RestClient(rest_url) as client, pytest.raises(errors.Unimplemented, match="REST API has no ReloadConfig"):
        client.reload_config('model_config_list { }')
    assert backend.calls["reload"] == 0


def test_grpc_carries_batches_over_the_default_4_mib_limit_both_ways(grpc_target):
    x = np.random.default_rng(1).random((1024, 2048), dtype=np.float32)  # 8 MiB
    with GrpcClient(grpc_target) as client:
        np.testing.assert_array_equal(client.predict("echo", x)["y"], x)
    with GrpcClient(grpc_target, max_message_bytes=4 * 1024 * 1024, retry=FAST) as small, \
            pytest.raises(errors.ResourceExhausted):
        small.predict("echo", {"x": x})


def test_rest_metadata_is_fetched_once_per_model_reference(rest_url, backend):
    with RestClient(rest_url) as client:
        for _ in range(3):
            client.predict("digits", np.ones((1, 8, 8, 1), np.float32))
    assert backend.calls["metadata"] == 1 and backend.calls["predict"] == 3


def test_failed_predict_drops_cached_metadata_so_it_is_fetched_again(rest_url, backend):
    with RestClient(rest_url, retry=FAST) as client:
        client.predict("digits", np.ones((1, 8, 8, 1), np.float32))
        backend.fail(errors.Code.NOT_FOUND, "Servable not found for request: Latest(digits)")
        with pytest.raises(errors.NotFound):
            client.predict("digits", np.ones((1, 8, 8, 1), np.float32))
        client.predict("digits", np.ones((1, 8, 8, 1), np.float32))
    assert backend.calls["metadata"] == 2


def test_version_and_label_together_are_rejected_before_sending(client, backend):
    with pytest.raises(ValueError, match="not both"):
        client.predict("digits", np.ones((1, 8, 8, 1), np.float32), version=1, label="stable")
    assert backend.calls["predict"] == 0
