"""The traffic seam without a gateway process: one weight vocabulary for Kubernetes, compose and no gateway.

Kubernetes and the compose engine cannot run here: the Kubernetes routes are
computed from the canary overlay's shape (the fixture of test_kubernetes) and
printed; the compose gateway's ``docker`` calls go to a recording stand-in for
``subprocess.run`` (no container to exec into). The host-nginx implementation
runs for real in tests/gateway/test_canary_routes.py.
"""
from __future__ import annotations

import subprocess

import pytest

from serving.rollout.analyze import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    Replay,
    Thresholds,
    analyze,
    gateway_error_rates,
    load_inputs,
)
from serving.rollout.kubernetes import load_objects, weight_patches
from serving.rollout.plan import RolloutError
from serving.rollout.traffic import ComposeGateway, KubernetesRoutes, NoGateway
from tests.support.rollout import FIXTURE


def test_kubernetes_routes_take_the_same_weight_as_the_gateway():
    printed = []
    routes = KubernetesRoutes(load_objects(FIXTURE), echo=printed.append)
    routes.set_weight("any-model", 10)
    assert printed == [p.command() for p in weight_patches(load_objects(FIXTURE), 10)]
    with pytest.raises(RolloutError, match="whole percentages"):
        routes.set_weight("any-model", 2.5)


def test_the_compose_gateway_writes_into_its_rendered_config_then_tests_and_reloads():
    calls = []

    def docker(args, **kwargs):  # stands in for subprocess.run: no Docker engine in the fast tier
        calls.append((args, kwargs.get("input")))
        return subprocess.CompletedProcess(args, 0, stdout="c0ffee\n" if args[1] == "ps" else "", stderr="")

    ComposeGateway(run=docker).set_weight("digits", 10)
    commands = [args[1:] for args, _ in calls]
    assert commands[0][:2] == ["ps", "-q"] and "label=com.docker.compose.service=gateway" in commands[0]
    assert commands[-2:] == [["exec", "c0ffee", "nginx", "-t", "-q", "-c", "/tmp/nginx.conf"],
                             ["exec", "c0ffee", "nginx", "-s", "reload", "-c", "/tmp/nginx.conf"]]
    written = {args[-1]: text for args, text in calls if text is not None}
    assert set(written) == {"/tmp/canary.d/digits.conf", "/tmp/canary.d/digits.map"}
    assert "10% canary;" in written["/tmp/canary.d/digits.conf"]


def test_without_a_gateway_only_weight_0_is_possible():
    NoGateway().set_weight("digits", 0)
    with pytest.raises(RolloutError, match="needs a gateway"):
        NoGateway().set_weight("digits", 10)


def test_gateway_error_rates_per_label_from_the_access_log():
    lines = ['{"uri":"/v1/models/m:predict","route_label":"stable","status":200}',
             '{"uri":"/v1/models/m:predict","route_label":"canary","status":503}',
             '{"uri":"/v1/models/m/labels/canary:predict","route_label":"","status":200}',
             '{"uri":"/v1/models/other:predict","route_label":"canary","status":500}', "not json"]
    rates = gateway_error_rates(lines, "m")
    assert rates == {"stable_requests": 1, "stable_rate": 0.0, "canary_requests": 2, "canary_rate": 0.5}


def _replay(stable_ms, canary_ms, canary_errors=0, rows=30):
    import numpy as np

    answer = {"scores": np.eye(3, dtype=np.float32)[[0]], "ids": np.array([1])}
    return Replay({"stable": [[s / 1e3] * rows for s in stable_ms], "canary": [[c / 1e3] * rows for c in canary_ms]},
                  {"stable": [answer], "canary": [answer]},
                  {"stable": [], "canary": ["UNAVAILABLE"] * canary_errors},
                  {"stable": rows * len(stable_ms), "canary": rows * len(canary_ms)})


@pytest.mark.parametrize("canary_ms, errors, verdict", [
    ((10, 10, 10), 0, PASS), ((60, 60, 60), 0, FAIL), ((20, 5, 20), 0, INCONCLUSIVE), ((10, 10, 10), 9, FAIL)],
    ids=["same", "slower-every-round", "rounds-disagree", "errors"])
def test_verdicts_from_latency_rounds_and_errors(canary_ms, errors, verdict):
    report = analyze("m", _replay((10, 10, 10), canary_ms, errors), Thresholds(), top1="scores")
    assert report.verdict == verdict, report.table()
    assert {c.name for c in report.checks} >= {"agreement:scores", "agreement:ids", "latency:p50", "errors"}


def test_a_rest_body_and_an_npz_are_inputs(tmp_path):
    import numpy as np

    (tmp_path / "body.json").write_text('{"instances": [[1, 2], [3, 4], [5, 6]]}')
    batches = load_inputs(str(tmp_path / "body.json"), None, batch_size=2)
    assert [b["inputs"].tolist() for b in batches] == [[[1, 2], [3, 4]], [[5, 6]]]
    np.savez(tmp_path / "x.npz", images=np.zeros((3, 2), np.float32))
    assert [b["images"].shape for b in load_inputs(str(tmp_path / "x.npz"), None)] == [(1, 2)] * 3


def test_a_file_of_prediction_logs_gives_its_predict_requests_and_refuses_other_records(tmp_path):
    import numpy as np

    from serving import codec, status
    from serving.capture._tfrecord import frame
    from serving.wire import serving_apis_pb2 as apis

    predict, classify = apis.PredictionLog(), apis.PredictionLog()
    codec.ndarray_to_tensor_proto(np.arange(6.0).reshape(2, 3), predict.predict_log.request.inputs["x"])
    classify.classify_log.request.model_spec.name = "m"
    (tmp_path / "logs").write_bytes(frame(classify.SerializeToString()) + frame(predict.SerializeToString()))
    (batch,) = load_inputs(str(tmp_path / "logs"), None)
    assert batch["x"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    (tmp_path / "garbage").write_bytes(frame(b"\xff\xff\xff"))
    with pytest.raises(status.InvalidArgument, match="not a PredictionLog"):
        load_inputs(str(tmp_path / "garbage"), None)


@pytest.mark.slow
def test_the_exporters_warmup_records_are_inputs(model_repo):
    from exporter.manifest import load_manifest

    batches = load_inputs("warmup", model_repo / "digits" / "1")
    spec = load_manifest(model_repo / "digits" / "1").signatures["serving_default"].inputs["images"]
    assert batches and all(b["images"].dtype == spec.dtype and b["images"].shape[1:] == (8, 8, 1) for b in batches)


def test_the_rollout_reaches_the_gateway_of_the_compose_project_make_up_recorded(tmp_path):
    from serving.config.served_config import STATE_FILE, StackState, write_state
    from serving.rollout.cli import _routes, build_parser

    write_state(StackState("compose-cpu", tmp_path / "models.config", "127.0.0.1:8500", "https://127.0.0.1:8443",
                           tmp_path / "models", compose_files=(tmp_path / "docker-compose.yml",),
                           compose_project="tfs-stack-e2e-1"), tmp_path / STATE_FILE)
    args = build_parser().parse_args(["canary", "digits", "2", "--work-dir", str(tmp_path)])
    routes = _routes(args)
    assert isinstance(routes, ComposeGateway) and routes.project == "tfs-stack-e2e-1"
    write_state(StackState("embedded", tmp_path / "models.config", "127.0.0.1:8500", "http://127.0.0.1:8501",
                           tmp_path / "models"), tmp_path / STATE_FILE)
    assert isinstance(_routes(args), NoGateway)
