"""Canary, rollback and promotion against the embedded server while clients keep calling.

The server runs the compose `tfserving` command (CPU variant, paths remapped,
digits only for a quick start). Client threads call Predict on the `stable`
and `canary` labels without pause; the rollout CLI moves the labels with
HandleReloadConfigRequest. Not one request may fail.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import grpc
import pytest

from loadtest import driver
from serving import codec
from serving.checkout import REPO_ROOT
from serving.config import load_model_server_config
from serving.config.compose import load_compose_model, plan_embedded_server
from serving.rollout.plan import find_model, served_versions
from serving.rollout.publish import publish_saved_model
from serving.stack.choice import compose_files
from tests.support.compose import PASSWORD, compose_env
from tests.support.servers import EmbeddedServer

pytestmark = pytest.mark.slow
MODEL = "digits"


class Load:
    """Callers of Predict on each label (the one driver's closed loop) until stopped; records (label, version).

    ``served[i]`` answered a request sent at ``sent[i]`` (``loadtest.driver.clock()``); ``answered`` is
    notified on every answer.
    """

    def __init__(self, target: str, inputs: dict, threads_per_label: int = 2) -> None:
        from serving.wire import PREDICT, apis  # TF Serving's wire format, without importing TensorFlow

        self.channel = grpc.insecure_channel(target)
        self.predict = self.channel.unary_unary(PREDICT, request_serializer=apis.PredictRequest.SerializeToString,
                                                response_deserializer=apis.PredictResponse.FromString)
        self.served: list[tuple[str, int]] = []
        self.sent: list[float] = []
        self.answered = threading.Condition()
        self.loads = {}
        for label in ("stable", "canary"):
            request = apis.PredictRequest()
            request.model_spec.name = MODEL
            request.model_spec.version_label = label
            for key, array in inputs.items():
                codec.ndarray_to_tensor_proto(array, request.inputs[key])
            self.loads[label] = driver.Load(driver.call_transport(lambda label=label, request=request:
                                                                  self._call(label, request)), threads_per_label)

    def _call(self, label: str, request) -> None:
        sent = driver.clock()
        response = self.predict(request, timeout=60)   # an error is the driver's record
        with self.answered:
            self.served.append((label, response.model_spec.version.value))
            self.sent.append(sent)
            self.answered.notify_all()

    @property
    def errors(self) -> list[str]:
        return [f"{label}: {r.error}: {r.details}" for label, load in self.loads.items()
                for r in list(load.records) if r.error]

    def sent_since(self, since: float, start: int) -> Counter:
        """(label, version) counts of answers to requests sent at ``since`` or later (from index ``start``)."""
        return Counter(answer for answer, sent in zip(self.served[start:], self.sent[start:]) if sent >= since)

    def __enter__(self) -> "Load":
        for load in self.loads.values():
            load.start()
        return self

    def __exit__(self, *exc) -> None:
        for load in self.loads.values():
            load.stop(90)
        self.channel.close()


def rollout(server: EmbeddedServer, config: Path, repo: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "serving.rollout", *args, "--model", MODEL,
                           "--grpc", server.grpc_target, "--config-file", str(config), "--model-repo", str(repo),
                           "--timeout", "180"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr + server.log_tail()
    return proc.stdout


def state(config: Path) -> tuple[list[int], dict[str, int]]:
    entry = find_model(load_model_server_config(config), MODEL)
    return served_versions(entry), dict(entry.version_labels)


def wait_for_traffic(load: Load, minimum: int = 20) -> Counter:
    """Answers to requests sent from now on (not those in flight), at least ``minimum`` per label."""
    counts: Counter = Counter()

    def enough() -> bool:
        counts.clear()
        counts.update(load.sent_since(since, start))
        per_label = Counter(label for label, _ in counts.elements())
        return min(per_label["stable"], per_label["canary"]) >= minimum

    with load.answered:
        start = len(load.served)  # the answers so far were to requests sent before ``since``
        since = driver.clock()
        if load.answered.wait_for(enough, timeout=60):
            return counts
    raise AssertionError(f"too little traffic: {counts}; errors: {load.errors[:5]}")


@pytest.fixture
def digits_repo(model_repo: Path, tmp_path: Path) -> Path:
    """A writable repository holding digits version 1 only."""
    repo = tmp_path / "models"
    shutil.copytree(model_repo / MODEL, repo / MODEL)
    return repo


def test_canary_rollback_and_promotion_under_load_fail_no_request(digits_repo, tmp_path):
    from exporter.manifest import load_manifest

    repo = digits_repo
    service = load_compose_model(compose_files("embedded"), services=["tfserving"],
                                 env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD))["services"]["tfserving"]
    plan = plan_embedded_server(service, work_dir=tmp_path, models_dir=repo, models=[MODEL],
                                overrides={"port": None, "rest_api_port": None})
    inputs = load_manifest(repo / MODEL / "1").sample_inputs(batch_size=2)
    config = plan.models_config
    with EmbeddedServer(plan.args, wait_for=[MODEL], timeout=240) as server, Load(server.grpc_target, inputs) as load:
        assert set(wait_for_traffic(load)) == {("stable", 1), ("canary", 1)}

        publish_saved_model(repo / MODEL / "1", repo, MODEL, 2)
        assert set(wait_for_traffic(load)) == {("stable", 1), ("canary", 1)}  # published is not served

        out = rollout(server, config, repo, "canary", "--version", "2")
        assert "load digits versions [1, 2]" in out and "move digits labels" in out
        assert state(config) == ([1, 2], {"stable": 1, "canary": 2})  # written back for the poller
        assert set(wait_for_traffic(load)) == {("stable", 1), ("canary", 2)}

        rollout(server, config, repo, "rollback")
        assert state(config) == ([1], {"stable": 1, "canary": 1})
        assert set(wait_for_traffic(load)) == {("stable", 1), ("canary", 1)}

        rollout(server, config, repo, "canary", "--version", "2")
        rollout(server, config, repo, "promote")
        assert state(config) == ([2], {"stable": 2, "canary": 2})
        assert set(wait_for_traffic(load)) == {("stable", 2), ("canary", 2)}
        status = subprocess.run([sys.executable, "-m", "serving.rollout", "status", "--model", MODEL, "--grpc",
                                 server.grpc_target, "--config-file", str(config)],
                                cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        assert "config serves [2], labels {'canary': 2, 'stable': 2}" in status.stdout, status.stderr
        assert "version 2: AVAILABLE" in status.stdout

    print(f"served {len(load.served)} requests during the rollouts, {len(load.errors)} failed: {Counter(load.served)}")
    assert load.errors == []
    assert len(load.served) > 200


def test_canary_to_a_version_that_was_never_published_is_refused_before_any_push(digits_repo, tmp_path):
    repo = digits_repo
    config = tmp_path / "models.config"
    config.write_text((REPO_ROOT / "serving/models.cpu.config").read_text())
    before = config.read_text()
    proc = subprocess.run([sys.executable, "-m", "serving.rollout", "canary", "--model", MODEL, "--version", "7",
                           "--grpc", "127.0.0.1:1", "--config-file", str(config), "--model-repo", str(repo)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "version(s) [7] not found" in proc.stderr
    assert config.read_text() == before
