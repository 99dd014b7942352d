"""``analyze --live``'s parts without a server: the capture tail, the record reader, the comparison loop.

The capture files are written here the way ``serving.capture``'s writer lays them out (TFRecord frames of
``PredictionLog`` records, written as ``<name>.part`` and renamed when closed) by :class:`CaptureFiles`,
which tests/rollout/test_shadow.py uses to record the traffic its clients send through the gateway.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Mapping, Optional

import numpy as np
import pytest

from serving import capture, codec, status
from serving.capture._tfrecord import frame
from serving.rollout import analyze
from serving.rollout.live import CaptureTail, compare_live, parse_duration, parse_record
from serving.wire import serving_apis_pb2 as apis


def prediction_log(model: str, inputs: Mapping[str, np.ndarray], *, request_id: str = "", micros: int = 0,
                   signature: str = "serving_default", label: Optional[str] = None,
                   version: Optional[int] = None) -> bytes:
    """A serialized PredictionLog of one Predict, as the capture writes it (``serving.capture.prediction_log``)."""
    request = apis.PredictRequest()
    request.model_spec.name = model
    for name, array in inputs.items():
        codec.ndarray_to_tensor_proto(np.asarray(array), request.inputs[name])
    return capture.prediction_log("predict", request, model=model, origin="gateway", request_id=request_id,
                                  sampling_rate=1.0, version=version, label=label, signature=signature,
                                  when=micros / 1e6 if micros else None).SerializeToString()


class CaptureFiles:
    """A capture directory written as the capture writer does: ``<name>.part`` until closed, renamed then."""

    def __init__(self, directory: Path, per_file: int = 10) -> None:
        self.directory, self.per_file = Path(directory), per_file
        self.directory.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.sequence, self.in_file, self.current = 0, 0, None
        self.closed: list[Path] = []

    def write(self, record: bytes) -> None:
        with self.lock:
            if self.current is None:
                self.sequence += 1
                self.current = self.directory / f"capture-gateway-20260101T000000Z-{self.sequence:06d}.tfrecord.part"
            with open(self.current, "ab") as file:
                file.write(frame(record))
            self.in_file += 1
            if self.in_file >= self.per_file:
                self._close()

    def _close(self) -> None:
        if self.current is not None:
            final = self.current.with_name(self.current.name.removesuffix(".part"))
            os.replace(self.current, final)
            self.closed.append(final)
        self.current, self.in_file = None, 0

    def close(self) -> None:
        with self.lock:
            self._close()

    def joined(self, path: Path) -> Path:
        """Every closed file, in order, as one TFRecord file (what ``analyze --inputs FILE`` reads)."""
        path.write_bytes(b"".join(p.read_bytes() for p in sorted(self.closed)))
        return path


ROW = {"x": np.arange(3, dtype=np.float32).reshape(1, 3)}


def test_a_record_says_whose_request_it_is():
    record = parse_record(prediction_log("digits", ROW, request_id="r-1", micros=1_700_000_000_250_000))
    assert (record.model, record.version, record.label, record.signature, record.request_id) == \
        ("digits", None, None, "serving_default", "r-1")
    assert record.time == pytest.approx(1_700_000_000.25)
    np.testing.assert_array_equal(record.inputs()["x"], ROW["x"])
    assert parse_record(prediction_log("digits", ROW, label="canary")).label == "canary"
    assert parse_record(prediction_log("digits", ROW, version=3)).version == 3
    classify = capture.prediction_log("classify", apis.ClassificationRequest(), model="digits", origin="gateway",
                                      request_id="c", sampling_rate=1.0)
    assert parse_record(classify.SerializeToString()) is None  # not a Predict


def test_the_tail_reads_appends_renames_new_files_and_forgets_deleted_ones(tmp_path):
    files = CaptureFiles(tmp_path / "capture", per_file=3)
    files.write(prediction_log("digits", ROW, request_id="before"))
    tail = CaptureTail(files.directory)  # from now on: "before" is not news
    assert tail.poll() == []
    for i in range(2):
        files.write(prediction_log("digits", ROW, request_id=f"a{i}"))  # closes the first file at 3
    files.write(prediction_log("digits", ROW, request_id="b0"))  # a new .part file
    assert [parse_record(r).request_id for r in tail.poll()] == ["a0", "a1", "b0"]
    assert tail.poll() == []
    # Half a frame: nothing yet; the rest: the record.
    part = files.current
    whole = frame(prediction_log("digits", ROW, request_id="b1"))
    with open(part, "ab") as file:
        file.write(whole[:20])
    assert tail.poll() == []
    with open(part, "ab") as file:
        file.write(whole[20:])
    files.in_file += 1
    assert [parse_record(r).request_id for r in tail.poll()] == ["b1"]
    # A bad checksum: skipped and counted, the next record still read.
    bad = bytearray(frame(prediction_log("digits", ROW, request_id="bad")))
    bad[-1] ^= 0xFF
    with open(part, "ab") as file:
        file.write(bytes(bad))
    files.in_file += 1
    files.write(prediction_log("digits", ROW, request_id="c0"))  # the 3rd of this file: renamed now
    assert [parse_record(r).request_id for r in tail.poll()] == ["c0"] and tail.bad == 1
    for path in files.closed:
        path.unlink()  # the capture's budget deleted them
    files.write(prediction_log("digits", ROW, request_id="d0"))
    assert [parse_record(r).request_id for r in tail.poll()] == ["d0"]
    assert [parse_record(r).request_id for r in CaptureTail(files.directory, from_start=True).poll()] == ["d0"]


def _sides(canary_kind: str = "same", fail: Optional[threading.Event] = None):
    def stable(inputs):
        x = np.asarray(inputs["x"], dtype=np.float32)
        return {"probabilities": np.stack([x.sum(1), -x.sum(1)], axis=1), "classes": np.zeros(len(x), np.int64)}

    def canary(inputs):
        if fail is not None and fail.is_set():
            raise status.Unavailable("the canary is gone")
        answer = stable(inputs)
        if canary_kind == "shuffled":
            answer = {"probabilities": answer["probabilities"][:, ::-1], "classes": np.ones(len(inputs["x"]), np.int64)}
        return answer

    return [analyze.Side("stable", stable), analyze.Side("canary", canary)]


def _capture_with(tmp_path, records: list[bytes]) -> CaptureTail:
    files = CaptureFiles(tmp_path / "capture", per_file=7)
    tail = CaptureTail(files.directory)
    for record in records:
        files.write(record)
    return tail


def rows(n: int, model: str = "digits", **kwargs) -> list[bytes]:
    return [prediction_log(model, {"x": np.full((1, 3), i, np.float32)}, request_id=f"r{i}", **kwargs)
            for i in range(n)]


@pytest.mark.parametrize("kind, verdict", [("same", analyze.PASS), ("shuffled", analyze.FAIL)])
def test_live_answers_go_to_the_offline_verdict(tmp_path, kind, verdict):
    records = rows(30) + rows(3, label="canary") + rows(2, model="text") + rows(2, version=1)
    tail = _capture_with(tmp_path, records)
    replayed, counts = compare_live("digits", _sides(kind), tail, rounds=3, concurrency=3, max_requests=30,
                                    poll_s=0.01)
    assert counts.compared == 30 and counts.records <= len(records)
    assert sum(len(window) for window in replayed.latencies["stable"]) == 30
    assert len(replayed.latencies["stable"]) == 3  # the windows stand for the offline rounds
    report = analyze.analyze("digits", replayed, analyze.Thresholds(max_p50_ratio=1e9, max_p99_ratio=1e9))
    assert report.verdict == verdict, report.table()
    # The same requests replayed offline (one round), the same verdict.
    offline = analyze.replay(_sides(kind), [parse_record(r).inputs() for r in records[:30]], rounds=1)
    assert analyze.analyze("digits", offline, analyze.Thresholds(max_p50_ratio=1e9, max_p99_ratio=1e9)).verdict \
        == verdict


def test_records_the_analysis_does_not_compare_are_counted_with_the_reason(tmp_path):
    # A label is compared (the gateway's capture records an unlabeled call under the label its routes chose);
    # a version is not (the analysis' own calls name their versions).
    records = (rows(2, model="text") + rows(2, version=1) + rows(1, signature="other") + rows(3, label="stable")
               + rows(5))
    tail = _capture_with(tmp_path, records)
    _, counts = compare_live("digits", _sides(), tail, max_requests=8, poll_s=0.01)
    assert counts.compared == 8
    assert counts.skipped == {"names a version": 2, "other model": 2, "other signature": 1}


def test_a_failing_canary_is_counted_as_its_errors(tmp_path):
    fail = threading.Event()
    fail.set()
    tail = _capture_with(tmp_path, rows(25))
    replayed, _ = compare_live("digits", _sides(fail=fail), tail, max_requests=25, poll_s=0.01)
    report = analyze.analyze("digits", replayed)
    assert report.verdict == analyze.FAIL and len(replayed.errors["canary"]) == 25


def test_the_duration_stops_a_quiet_capture(tmp_path):
    tail = _capture_with(tmp_path, [])
    replayed, counts = compare_live("digits", _sides(), tail, duration=0.2, poll_s=0.01)
    assert counts.compared == 0
    assert analyze.analyze("digits", replayed).verdict == analyze.INCONCLUSIVE  # nothing compared, nothing proved


def test_durations():
    assert [parse_duration(t) for t in ("90", "90s", "10m", "1h", "0.5")] == [90, 90, 600, 3600, 0.5]
    for bad in ("", "ten", "-1", "0", "5d"):
        with pytest.raises(ValueError, match="duration"):
            parse_duration(bad)


def _report(verdict: str) -> analyze.Report:
    return analyze.Report("digits", verdict, (analyze.Check("agreement:classes", verdict, 1.0, 0.99),), {}, {}, {})


class _Routes:
    def __init__(self) -> None:
        self.calls: list = []

    def describe(self) -> str:
        return "routes"

    def set_weight(self, model, weight, *, shadow=0.0, expected=None):
        self.calls.append(("weight", weight, shadow))
        return ""

    def clear(self, model, *, expected=None):
        self.calls.append(("clear",))
        return ""

    def state(self, model):
        return ""


@pytest.mark.parametrize("shadow_verdict", [analyze.PASS, analyze.FAIL])
def test_auto_gates_the_first_weight_on_the_shadow_phase(shadow_verdict):
    from serving.rollout.auto import run_auto

    routes, moves, analyses = _Routes(), [], []

    def analysis(_gateway):
        analyses.append("offline")
        return _report(analyze.PASS)

    def shadow_phase():
        analyses.append("live")
        return _report(shadow_verdict)

    code, doc = run_auto("digits", 2, [10, 100], canary=lambda: moves.append("canary"),
                         promote=lambda: moves.append("promote"), rollback=lambda: moves.append("rollback"),
                         routes=routes, analyze_once=analysis, shadow_phase=shadow_phase, shadow_percent=50,
                         echo=lambda line: None)
    assert doc["decisions"][0]["step"] == "shadow" and doc["decisions"][0]["verdict"] == shadow_verdict
    if shadow_verdict == analyze.PASS:
        assert code == 0 and moves == ["canary", "promote"]
        # shadow on, shadow off (weight 0 without it), then the steps
        assert routes.calls == [("weight", 0, 50), ("weight", 0, 0.0), ("weight", 10, 0.0), ("weight", 100, 0.0)]
        assert analyses == ["live", "offline", "offline", "offline"]
    else:
        assert code == 1 and moves == ["canary", "rollback"]  # the rollback's route removal ends the shadow
        assert routes.calls == [("weight", 0, 50)] and analyses == ["live"]
        assert [d["step"] for d in doc["decisions"]] == ["shadow"]


@pytest.mark.parametrize("argv, message", [
    (["canary", "digits", "2", "--shadow", "--weight", "10"], "--shadow mirrors stable's traffic"),
    (["canary", "digits", "2", "--shadow", "150"], "a weight is a percentage"),
    (["analyze", "digits", "--live", "{tmp}"], "--live needs a stop condition"),
    (["analyze", "digits", "--live", "{tmp}/missing", "--requests", "5"], "no such directory"),
    (["analyze", "digits", "--requests", "5"], "--live's stop conditions"),
    (["auto", "digits", "2", "--shadow-phase", "10m"], "--shadow-phase needs --live DIR"),
    (["auto", "digits", "2", "--shadow-phase", "ten", "--live", "{tmp}"], "a duration is seconds"),
])
def test_contradictory_shadow_and_live_flags_are_refused_before_anything_moves(argv, message, tmp_path, capsys):
    from serving.rollout.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main([arg.replace("{tmp}", str(tmp_path)) for arg in argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
