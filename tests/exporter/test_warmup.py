"""The warmup file is TF Serving's: PredictionLog records that fit the signatures."""
from __future__ import annotations

import numpy as np
import pytest

from exporter import warmup
from exporter.manifest import load_manifest
from serving.codec import tensor_proto_to_ndarray
from tests.support.exporter import SMALL_MODELS


def _records(version_dir):
    """Parse the file independently of exporter.warmup.read_warmup."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    path = version_dir / "assets.extra" / "tf_serving_warmup_requests"
    return [prediction_log_pb2.PredictionLog.FromString(raw.numpy())
            for raw in tf.data.TFRecordDataset(str(path))]


@pytest.mark.parametrize("name", SMALL_MODELS)
def test_warmup_file_parses_as_prediction_logs_whose_requests_match_the_signatures(model_repo, name):
    version_dir = model_repo / name / "1"
    manifest = load_manifest(version_dir)
    records = _records(version_dir)
    assert 0 < len(records) <= 1000
    seen = set()
    for record in records:
        assert record.WhichOneof("log_type") == "predict_log"
        request = record.predict_log.request
        assert request.model_spec.name == name
        signature = manifest.signatures[request.model_spec.signature_name]
        assert set(request.inputs) == set(signature.inputs)
        batch = set()
        for key, proto in request.inputs.items():
            spec = signature.inputs[key]
            array = tensor_proto_to_ndarray(proto)
            assert array.dtype == spec.dtype
            assert array.shape[1:] == tuple(spec.shape[1:])
            batch.add(array.shape[0])
        assert len(batch) == 1
        seen.add((request.model_spec.signature_name, batch.pop()))
    allowed = manifest.warmup["allowed_batch_sizes"]
    assert manifest.warmup["batch_sizes"] == allowed  # small models: nothing left out
    expected = {(sig, size) for sig in manifest.signatures for size in allowed}
    assert seen == expected


def test_warmup_requests_carry_the_golden_rows(model_repo):
    version_dir = model_repo / "digits" / "1"
    golden = load_manifest(version_dir).golden_inputs()["images"]
    first = next(r for r in _records(version_dir) if r.predict_log.request.model_spec.signature_name
                 == "serving_default" and r.predict_log.request.inputs["images"].tensor_shape.dim[0].size == 4)
    np.testing.assert_array_equal(tensor_proto_to_ndarray(first.predict_log.request.inputs["images"]), golden[:4])


def test_allowed_batch_sizes_come_from_the_batching_config(tmp_path):
    config = tmp_path / "batching.config"
    config.write_text("max_batch_size { value: 12 }\nallowed_batch_sizes: 3\n"
                      "allowed_batch_sizes: 6\nallowed_batch_sizes: 12\n")
    assert warmup.allowed_batch_sizes(config) == (3, 6, 12)


def test_allowed_batch_sizes_fall_back_to_the_default_when_missing_or_unset(tmp_path):
    assert warmup.allowed_batch_sizes(tmp_path / "absent.config") == warmup.DEFAULT_BATCH_SIZES
    config = tmp_path / "batching.config"
    config.write_text("max_batch_size { value: 8 }\n")
    assert warmup.allowed_batch_sizes(config) == warmup.DEFAULT_BATCH_SIZES == (1, 2, 4, 8, 16, 32)


def test_a_broken_batching_config_is_an_error_not_a_silent_default(tmp_path):
    config = tmp_path / "batching.config"
    config.write_text("max_batch_sizes: nonsense\n")
    with pytest.raises(ValueError, match="BatchingParameters"):
        warmup.allowed_batch_sizes(config)


def test_build_requests_leaves_out_the_largest_sizes_beyond_the_byte_budget():
    rows = {"x": np.ones((2, 1000), np.float32)}  # 4000 bytes a row
    logs = warmup.build_requests("m", {"serving_default": rows}, [1, 2, 4, 8], max_bytes=4000 * 7)
    assert [r.predict_log.request.inputs["x"].tensor_shape.dim[0].size for r in logs] == [1, 2, 4]


def test_build_requests_never_exceeds_tf_servings_record_limit():
    rows = {"x": np.zeros((1, 1), np.float32)}
    signatures = {f"s{i}": rows for i in range(400)}
    logs = warmup.build_requests("m", signatures, [1, 2, 4])
    assert len(logs) == warmup.MAX_RECORDS
