"""Warmup replays assets.extra/tf_serving_warmup_requests at load time."""
from __future__ import annotations

import logging

import pytest

from serving import status
from serving.server.tensorflow.loader import LoaderOptions, SavedModelLoader
from serving.server.tensorflow.warmup import run_saved_model_warmup, warmup_path
from tests.support.lifecycle import model_server_config, states
from tests.support.models import publish, write_warmup


def counting_wrapper(calls: list):
    def wrapper(servable, run):
        def wrapped(signature, inputs, outputs):
            calls.append(signature)
            return run(signature, inputs, outputs)
        return wrapped
    return wrapper


@pytest.fixture
def version_dir(tmp_path, affine_templates):
    return publish(affine_templates[1.0], tmp_path / "affine", 1)


@pytest.mark.parametrize("kind, signature", [
    ("predict", "serving_default"), ("classify", "classification"), ("regress", "regression")])
def test_each_record_is_replayed_iterations_times(version_dir, metrics, kind, signature, caplog):
    write_warmup(version_dir, 3, kind)
    calls: list = []
    options = LoaderOptions(num_request_iterations_for_warmup=2, run_wrapper=counting_wrapper(calls))
    with caplog.at_level(logging.INFO, logger="serving.server.tensorflow.warmup"):
        SavedModelLoader(options, metrics).load("affine", 1, str(version_dir)).close()
    assert calls == [signature] * 6
    assert metrics.warmups == [(str(version_dir), True, 3)]
    assert f"Starting to read warmup data for model at {warmup_path(str(version_dir))}" in caplog.text
    assert (f"Finished reading warmup data for model at {warmup_path(str(version_dir))}. "
            "Number of warmup records read: 3.") in caplog.text


def test_missing_warmup_file_is_logged_and_the_load_succeeds(version_dir, metrics, caplog):
    with caplog.at_level(logging.INFO, logger="serving.server.tensorflow.warmup"):
        SavedModelLoader(LoaderOptions(), metrics).load("affine", 1, str(version_dir)).close()
    assert f"No warmup data file found at {warmup_path(str(version_dir))}" in caplog.text
    assert metrics.warmups == []


def test_disabled_warmup_does_not_read_the_file(version_dir, metrics):
    write_warmup(version_dir, 2)
    calls: list = []
    options = LoaderOptions(enable_model_warmup=False, run_wrapper=counting_wrapper(calls))
    SavedModelLoader(options, metrics).load("affine", 1, str(version_dir)).close()
    assert calls == [] and metrics.warmups == []


def test_more_than_1000_records_fail_the_load(version_dir, metrics):
    write_warmup(version_dir, 1001)
    with pytest.raises(status.InvalidArgument) as info:
        SavedModelLoader(LoaderOptions(), metrics).load("affine", 1, str(version_dir))
    assert info.value.details == (
        f"Number of warmup records exceeds the maximum (1000) at {warmup_path(str(version_dir))}")
    assert metrics.warmups == [(str(version_dir), False, 1001)]


def test_exactly_1000_records_are_allowed(version_dir, metrics):
    write_warmup(version_dir, 1000)
    SavedModelLoader(LoaderOptions(), metrics).load("affine", 1, str(version_dir)).close()
    assert metrics.warmups == [(str(version_dir), True, 1000)]


def test_a_warmup_file_that_is_not_tfrecord_fails_with_data_loss(version_dir):
    path = write_warmup(version_dir, 1)
    path.write_bytes(b"this is not a TFRecord file at all" * 4)
    with pytest.raises(status.DataLoss, match="Please verify your warmup data is in TFRecord format"):
        SavedModelLoader(LoaderOptions()).load("affine", 1, str(version_dir))


def test_a_failing_warmup_request_fails_the_load_and_the_version_is_reported(
        make_manager, tmp_path, affine_templates):
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

    from serving.codec import ndarray_to_tensor_proto

    version_dir = publish(affine_templates[1.0], tmp_path / "affine", 1)
    request = predict_pb2.PredictRequest()
    ndarray_to_tensor_proto(np.ones((1, 3), np.int32), request.inputs["x"])  # wrong dtype (shapes are not checked)
    target = version_dir / "assets.extra" / "tf_serving_warmup_requests"
    target.parent.mkdir()
    with tf.io.TFRecordWriter(str(target)) as writer:
        writer.write(prediction_log_pb2.PredictionLog(
            predict_log=prediction_log_pb2.PredictLog(request=request)).SerializeToString())
    manager = make_manager(retries=0)
    with pytest.raises(status.Unknown, match="INVALID_ARGUMENT"):
        manager.reload_config(model_server_config(("affine", tmp_path / "affine")))
    assert states(manager, "affine") == {1: "END"}
    assert manager.model_status("affine")[0].error_code == status.Code.INVALID_ARGUMENT


def test_warmup_can_be_run_directly_on_a_servable(version_dir):
    write_warmup(version_dir, 5, "regress")
    servable = SavedModelLoader(LoaderOptions(enable_model_warmup=False)).load(
        "affine", 1, str(version_dir))
    try:
        assert run_saved_model_warmup(servable, str(version_dir)) == 5
    finally:
        servable.close()
