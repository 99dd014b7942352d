"""The run summary and locust's final totals have the shapes ``loadtest.documents`` types (no locust, no server)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from loadtest import documents, runner
from loadtest.driver import Load, Record
from loadtest.payloads import Payload
from loadtest.replay import Lag
from loadtest.slo import Gates

FINAL = {"requests": 1000, "failures": 3, "rps": 100.5, "avg_ms": 1.5, "max_ms": 9,
         "errors": {"grpc Predict digits: Unavailable('connection refused')": 3}}


def test_locust_final_totals_parse_as_written():
    assert documents.parse_locust_final(FINAL) == FINAL
    assert documents.parse_locust_final({}) == {}


@pytest.mark.parametrize("bad", [[], {"requests": "1000"}, {"failures": True}, {"rps": None},
                                 {"errors": ["refused"]}, {"errors": {"refused": 1.5}}])
def test_locust_final_totals_of_the_wrong_type_are_refused(bad):
    with pytest.raises(ValueError, match="(object|count|number)"):
        documents.parse_locust_final(bad)


def _csv(prefix, requests):
    (prefix.parent / f"{prefix.name}_stats.csv").write_text(
        "Type,Name,Request Count,Failure Count,Requests/s,Average Response Time,Max Response Time,50%,90%,95%,99%\n"
        f",Aggregated,{requests},0,10.0,2.0,8.0,2,3,4,5\n")


def test_a_runs_totals_come_from_locusts_final_file_else_its_csv(tmp_path):
    prefix = tmp_path / "steady_grpc"
    _csv(prefix, 40)
    (tmp_path / "steady_grpc_final.json").write_text(json.dumps(FINAL))
    totals = runner.summarize_csv(prefix)
    assert set(totals) == documents.LocustTotals.__required_keys__
    assert (totals["requests"], totals["totals"], totals["p99_ms"]) == (1000, "final", 5.0)
    (tmp_path / "steady_grpc_final.json").write_text(json.dumps({**FINAL, "requests": "many"}))
    totals = runner.summarize_csv(prefix)
    assert totals["requests"] == 40 and totals["totals"].startswith("locust CSV")


def test_a_replay_summary_has_every_key_of_its_document(tmp_path):
    load = Load(transport=None, concurrency=1)
    load.records.extend([Record(1.0 + i / 100, 0.002) for i in range(9)] + [Record(1.1, 0.002, "HTTP 503", "x")])
    lag = Lag(10, 0.1, 0.0, 0.001, 0.002, 0, 0.01)
    payload = Payload("digits", "serving_default", {"x": np.zeros((1, 2), np.float32)}, "Predict", b"", "/v1")
    outcome = runner.replay_outcome(load, lag, [i / 100 for i in range(10)], "grpc", payload, "recorded", 1.0,
                                    Gates(max_failure_ratio=0.0), tmp_path)
    assert set(outcome.summary) == documents.ReplaySummary.__required_keys__
    assert outcome.summary["gates"] == [{"gate": "max_failure_ratio", "limit": 0.0, "measured": 0.1, "passed": False}]
    assert outcome.summary["run_ok"] and not outcome.summary["passed"]
    assert outcome.exit_code == runner.EXIT_GATE_BROKEN
    assert json.loads(outcome.summary_path.read_text())["failures_by_class"] == {"gateway_limited": 0, "server": 1}
