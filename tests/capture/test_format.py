"""The capture file format: TensorFlow's TFRecord framing of TF Serving's PredictionLog.

Proved against the real things: TF Serving's ``prediction_log_pb2`` parses our
records, ``tf.data.TFRecordDataset`` reads our files, and we read a file that
``tf.io.TFRecordWriter`` wrote.
"""
from __future__ import annotations

import datetime as dt
import struct
from pathlib import Path

import numpy as np
import pytest

from serving.capture import (
    CaptureError,
    CaptureRecord,
    is_capture,
    prediction_log,
    read_capture,
)
from serving.capture._tfrecord import frame
from serving.codec import ndarray_to_tensor_proto
from serving.wire import apis


def _predict_log(model: str = "digits", *, when: float = 1_700_000_000.25, rows: int = 2,
                 request_id: str = "req-1", version: int | None = 3) -> object:
    request = apis.PredictRequest()
    request.model_spec.name = model
    ndarray_to_tensor_proto(np.arange(rows * 4, dtype=np.float32).reshape(rows, 4), request.inputs["x"])
    response = apis.PredictResponse()
    ndarray_to_tensor_proto(np.ones((rows, 1), np.float32), response.outputs["y"])
    return prediction_log("predict", request, response, model=model, version=version, origin="embedded-server",
                          request_id=request_id, sampling_rate=0.5, signature="serving_default", when=when)


def _classify_log(model: str = "ranker", when: float = 1_700_000_100.0) -> object:
    request = apis.ClassificationRequest()
    request.model_spec.name = model
    request.input.example_list.examples.add().features.feature["f"].float_list.value.append(1.5)
    return prediction_log("classify", request, None, model=model, label="stable", origin="gateway",
                          request_id="gw-7", sampling_rate=1.0, when=when)


def _write(path: Path, logs) -> Path:
    path.write_bytes(b"".join(frame(log.SerializeToString()) for log in logs))
    return path


def test_record_parses_with_tf_servings_own_prediction_log_and_keeps_our_two_fields():
    from tensorflow_serving.apis import prediction_log_pb2

    data = _predict_log().SerializeToString()
    official = prediction_log_pb2.PredictionLog.FromString(data)
    assert official.WhichOneof("log_type") == "predict_log"
    meta = official.log_metadata
    assert (meta.model_spec.name, meta.model_spec.version.value, meta.model_spec.signature_name) == (
        "digits", 3, "serving_default")
    assert list(meta.saved_model_tags) == ["serve"]
    assert meta.timestamp_secs == 1_700_000_000
    assert meta.request_origin == "embedded-server"
    assert meta.sampling_config.sampling_rate == 0.5
    assert official.predict_log.request.inputs["x"].tensor_shape.dim[0].size == 2
    assert official.predict_log.response.outputs["y"].tensor_shape.dim[1].size == 1
    # request_id (1001) and timestamp_micros (1002) are unknown to TF Serving: kept, and written back.
    again = apis.PredictionLog.FromString(official.SerializeToString())
    assert again.log_metadata.request_id == "req-1"
    assert again.log_metadata.timestamp_micros == 1_700_000_000_250_000


def test_tensorflow_reads_our_file_and_we_read_tensorflows(tmp_path: Path):
    import tensorflow as tf

    ours = _write(tmp_path / "ours.tfrecord", [_predict_log(request_id=f"r{i}") for i in range(3)])
    read_by_tf = [bytes(r.numpy()) for r in tf.data.TFRecordDataset(str(ours))]
    assert [apis.PredictionLog.FromString(d).log_metadata.request_id for d in read_by_tf] == ["r0", "r1", "r2"]

    theirs = tmp_path / "theirs.tfrecord"
    with tf.io.TFRecordWriter(str(theirs)) as writer:
        for log in (_predict_log(request_id="a"), _classify_log()):
            writer.write(log.SerializeToString())
    assert theirs.read_bytes() == _write(tmp_path / "same.tfrecord",
                                         [_predict_log(request_id="a"), _classify_log()]).read_bytes()
    assert [(r.method, r.request_id) for r in read_capture(theirs)] == [("predict", "a"), ("classify", "gw-7")]


def test_record_fields_and_inputs_decode():
    (record,) = [CaptureRecord.from_log(_predict_log())]
    assert (record.model, record.version, record.label, record.signature, record.method) == (
        "digits", 3, None, "serving_default", "predict")
    assert record.time == pytest.approx(1_700_000_000.25)
    np.testing.assert_array_equal(record.inputs()["x"], np.arange(8, dtype=np.float32).reshape(2, 4))
    assert record.response is not None and "y" in record.response.outputs
    classify = CaptureRecord.from_log(_classify_log())
    assert (classify.label, classify.version, classify.signature, classify.response) == (
        "stable", None, "serving_default", None)
    with pytest.raises(ValueError, match="Predict records"):
        classify.inputs()


def test_corrupt_length_checksum_names_file_and_offset(tmp_path: Path):
    path = _write(tmp_path / "c.tfrecord", [_predict_log(), _predict_log()])
    first = len(frame(_predict_log().SerializeToString()))
    data = bytearray(path.read_bytes())
    data[first + 9] ^= 0xFF  # the second record's length CRC
    path.write_bytes(bytes(data))
    with pytest.raises(CaptureError, match=rf"c\.tfrecord: record at byte offset {first}: length checksum") as err:
        list(read_capture(path))
    assert (err.value.path, err.value.offset) == (path, first)


def test_corrupt_data_checksum_names_file_and_offset(tmp_path: Path):
    path = _write(tmp_path / "d.tfrecord", [_predict_log()])
    data = bytearray(path.read_bytes())
    data[20] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CaptureError, match=r"d\.tfrecord: record at byte offset 0: data checksum"):
        list(read_capture(path))


def test_not_a_prediction_log_is_a_capture_error(tmp_path: Path):
    path = tmp_path / "x.tfrecord"
    path.write_bytes(frame(b"\xff\xff\xff"))
    with pytest.raises(CaptureError, match="offset 0: not a PredictionLog"):
        list(read_capture(path))


def test_truncated_tail_is_skipped_in_a_part_file_and_an_error_in_a_closed_one(tmp_path: Path):
    whole = b"".join(frame(_predict_log(request_id=f"r{i}").SerializeToString()) for i in range(2))
    cut = whole[:-7]
    part = tmp_path / "capture-embedded-server-20260101T000000Z-000001.tfrecord.part"
    part.write_bytes(cut)
    assert [r.request_id for r in read_capture(part)] == ["r0"]
    closed = tmp_path / "closed.tfrecord"
    closed.write_bytes(cut)
    with pytest.raises(CaptureError, match="truncated file"):
        list(read_capture(closed))
    header_only = tmp_path / "h.tfrecord"
    header_only.write_bytes(struct.pack("<Q", 5)[:6])
    with pytest.raises(CaptureError, match="offset 0: file ends inside the record's header"):
        list(read_capture(header_only))


def test_directory_reads_finished_files_in_name_order_and_parts_only_when_asked(tmp_path: Path):
    _write(tmp_path / "capture-gateway-20260101T000002Z-000002.tfrecord", [_predict_log(request_id="b")])
    _write(tmp_path / "capture-gateway-20260101T000001Z-000001.tfrecord", [_predict_log(request_id="a")])
    _write(tmp_path / "capture-gateway-20260101T000003Z-000003.tfrecord.part", [_predict_log(request_id="c")])
    (tmp_path / "notes.txt").write_text("not a capture")
    assert [r.request_id for r in read_capture(tmp_path)] == ["a", "b"]
    assert [r.request_id for r in read_capture(tmp_path, include_partial=True)] == ["a", "b", "c"]
    assert is_capture(tmp_path)
    assert not is_capture(tmp_path / "notes.txt")


def test_filters_by_time_model_and_method(tmp_path: Path):
    path = _write(tmp_path / "f.tfrecord", [
        _predict_log("digits", when=100.0, request_id="d100"),
        _predict_log("text", when=200.0, request_id="t200"),
        _classify_log("ranker", when=300.0),
    ])
    ids = lambda **kw: [r.request_id for r in read_capture(path, **kw)]
    assert ids(since=150) == ["t200", "gw-7"]
    assert ids(until=dt.datetime(1970, 1, 1, 0, 3, 20)) == ["d100"]  # naive datetime is UTC: 200 s, exclusive
    assert ids(models=["digits", "ranker"]) == ["d100", "gw-7"]
    assert ids(models="text") == ["t200"]
    assert ids(methods=["classify"]) == ["gw-7"]
    with pytest.raises(CaptureError, match="unknown method"):
        ids(methods=["predcit"])


def test_missing_source_is_a_capture_error(tmp_path: Path):
    with pytest.raises(CaptureError, match="no such capture file or directory"):
        list(read_capture(tmp_path / "nope"))
    assert not is_capture(tmp_path / "nope")


def test_a_directory_of_cut_files_is_a_capture(tmp_path: Path):
    _write(tmp_path / "noon.tfrecord", [_predict_log()])
    assert is_capture(tmp_path)
    (tmp_path / "noon.tfrecord").write_bytes(frame(b"\x08\x01"))
    assert not is_capture(tmp_path)


def test_a_tfrecord_of_other_data_is_not_a_capture(tmp_path: Path):
    path = tmp_path / "other.tfrecord"
    path.write_bytes(frame(b"\x08\x01"))  # parses, but holds no log
    assert not is_capture(path)
    assert is_capture(_write(tmp_path / "yes.bin", [_predict_log()]))
