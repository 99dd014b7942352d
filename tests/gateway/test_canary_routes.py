"""While a canary is loaded, requests that name no version and no label stay on ``stable``; weights split them.

The embedded server serves digits 1 (``stable``) and 2 (``canary``, a copy of
1: only the version number tells them apart) and ``text`` without labels, behind
the real nginx gateway. The version that answered is read from each response's
``model_spec.version`` (REST: the metadata call; gRPC: Predict's answer). The
canary routes are set with ``serving.rollout.traffic.HostNginx``, as
``python -m serving.rollout canary --gateway nginx`` sets them.
"""
from __future__ import annotations

import threading
from collections import Counter

import grpc
import httpx
import numpy as np
import pytest

from exporter.manifest import load_manifest
from gateway.canary import canary_route_files
from serving import codec
from serving.client import GrpcClient, RestClient
from serving.rollout.traffic import HostNginx
from serving.wire import PREDICT, apis
from tests.support.canary_stack import MODEL, canary_gateway, canary_repo, canary_server, send_resending_once

pytestmark = pytest.mark.slow
UNLABELED = 200  # requests per protocol for the before/after counts
SPLIT_REQUESTS, WEIGHT = 2000, 10


@pytest.fixture(scope="module")
def stack(model_repo, nginx, nginx_version, gateway_secrets, compose_gateway_env, tmp_path_factory):
    root = tmp_path_factory.mktemp("canary-routes")
    repo = canary_repo(model_repo, root / "models", others=["text"])
    (root / "server").mkdir()
    with canary_server(repo, root / "server", {"stable": 1, "canary": 2}, others=["text"]) as server, \
            canary_gateway(nginx, nginx_version, compose_gateway_env, root / "gateway", gateway_secrets,
                           server) as gateway:
        routes = HostNginx(gateway.conf_dir / "nginx.conf", nginx=nginx)
        yield gateway, routes
        routes.clear(MODEL)


@pytest.fixture
def inputs(model_repo):
    return load_manifest(model_repo / MODEL / "1").sample_inputs()


def rest_versions(gateway, count: int, threads: int = 1, path: str = f"/v1/models/{MODEL}/metadata") -> Counter:
    """The versions ``count`` unlabeled REST metadata calls through the gateway were answered by."""
    versions: Counter = Counter()
    lock = threading.Lock()

    def run(n: int) -> None:
        with gateway.http() as http:
            for _ in range(n):
                response = http.get(gateway.rest_url + path, headers={"x-api-key": gateway.key()})
                key = int(response.json()["model_spec"]["version"]) if response.status_code == 200 \
                    else f"HTTP {response.status_code}"
                with lock:
                    versions[key] += 1

    workers = [threading.Thread(target=run, args=(count // threads,)) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return versions


def raw_grpc_versions(gateway, inputs, count: int) -> Counter:
    """Unlabeled Predicts with a bare stub (what any client that sets no label sends)."""
    request = apis.PredictRequest()
    request.model_spec.name = MODEL
    for key, array in inputs.items():
        codec.ndarray_to_tensor_proto(array, request.inputs[key])
    metadata = (("x-api-key", gateway.key()),)
    with grpc.secure_channel(gateway.grpc_target, gateway.channel_credentials()) as channel:
        predict = channel.unary_unary(PREDICT, request_serializer=apis.PredictRequest.SerializeToString,
                                      response_deserializer=apis.PredictResponse.FromString)
        return Counter(predict(request, metadata=metadata, timeout=30).model_spec.version.value
                       for _ in range(count))


def sdk_grpc_versions(gateway, inputs, count: int) -> Counter:
    """Unlabeled Predicts with the SDK's GrpcClient (the version from the answer's model_spec, via metadata of
    the same label: the SDK's predict returns arrays only, so a raw answer is decoded here)."""
    with GrpcClient(gateway.grpc_target, root_certificates=gateway.secrets.ca_cert, api_key=gateway.key(),
                    timeout=30) as client:
        answers = Counter()
        for _ in range(count):
            assert np.asarray(client.predict(MODEL, inputs)["classes"]).shape == (1,)
            answers[client.metadata(MODEL).version] += 1
        return answers


def test_unlabeled_requests_reach_the_canary_without_routes_and_stable_with_them(stack, inputs, capsys):
    gateway, routes = stack
    routes.clear(MODEL)
    before = {"rest": rest_versions(gateway, UNLABELED), "grpc (bare stub)": raw_grpc_versions(gateway, inputs, UNLABELED)}
    routes.set_weight(MODEL, 0)
    after = {"rest": rest_versions(gateway, UNLABELED), "grpc (bare stub)": raw_grpc_versions(gateway, inputs, UNLABELED),
             "grpc (SDK)": sdk_grpc_versions(gateway, inputs, UNLABELED // 4)}
    with capsys.disabled():
        for when, counts in (("no canary routes", before), ("canary routes at weight 0", after)):
            for protocol, versions in counts.items():
                print(f"\n{when}: {protocol}: {versions[2]} of {sum(versions.values())} unlabeled requests "
                      f"reached the canary (version 2): {dict(versions)}")
    assert before["rest"] == {2: UNLABELED}  # TF Serving's rule: the latest version
    assert before["grpc (bare stub)"] == {2: UNLABELED}
    assert after["rest"] == {1: UNLABELED}
    assert after["grpc (SDK)"] == {1: UNLABELED // 4}
    # A bare gRPC stub is not covered: the model spec is inside the protobuf, which the gateway does not rewrite.
    assert after["grpc (bare stub)"] == {2: UNLABELED}


def test_requests_that_name_a_version_or_label_and_other_models_pass_unchanged(stack):
    gateway, routes = stack
    routes.set_weight(MODEL, 0)
    assert rest_versions(gateway, 5, path=f"/v1/models/{MODEL}/versions/2/metadata") == {2: 5}
    assert rest_versions(gateway, 5, path=f"/v1/models/{MODEL}/labels/canary/metadata") == {2: 5}
    with gateway.http() as http:
        status = http.get(f"{gateway.rest_url}/v1/models/{MODEL}", headers={"x-api-key": gateway.key()}).json()
        text = http.get(f"{gateway.rest_url}/v1/models/text/metadata", headers={"x-api-key": gateway.key()})
    assert sorted(int(v["version"]) for v in status["model_version_status"]) == [1, 2]  # status lists both
    assert text.status_code == 200, text.text
    # The SDK's default label meets a model without labels: it falls back to the unlabeled call.
    with GrpcClient(gateway.grpc_target, root_certificates=gateway.secrets.ca_cert, api_key=gateway.key()) as client:
        assert client.metadata("text").model == "text"


def test_rest_predict_is_rewritten_and_the_access_log_names_the_label(stack, inputs):
    gateway, routes = stack
    routes.set_weight(MODEL, 0)
    with RestClient(gateway.rest_url, root_certificates=gateway.secrets.ca_cert, api_key=gateway.key()) as client:
        assert np.asarray(client.predict(MODEL, inputs)["classes"]).shape == (1,)
    entries = gateway.access_entries(lambda es: any(e["uri"] == f"/v1/models/{MODEL}:predict" for e in es))
    predicts = [e for e in entries if e["uri"] == f"/v1/models/{MODEL}:predict"]
    assert predicts[-1]["route_label"] == "stable" and predicts[-1]["status"] == 200


def test_weight_10_sends_about_a_tenth_of_2000_requests_to_the_canary(stack, capsys):
    gateway, routes = stack
    routes.set_weight(MODEL, WEIGHT)
    versions = rest_versions(gateway, SPLIT_REQUESTS, threads=4)
    routes.set_weight(MODEL, 0)
    share = versions[2] / SPLIT_REQUESTS
    with capsys.disabled():
        print(f"\nweight {WEIGHT}: {versions[2]} of {SPLIT_REQUESTS} unlabeled REST requests on the canary "
              f"({share:.1%}): {dict(versions)}")
    assert sum(versions[v] for v in (1, 2)) == SPLIT_REQUESTS, versions
    assert abs(share - WEIGHT / 100) <= 0.02


def test_a_reload_under_load_loses_no_request(stack, inputs, capsys):
    gateway, routes = stack
    stop, sent, failures, resent = threading.Event(), Counter(), [], []

    def rest() -> None:
        with gateway.http() as http:
            while not stop.is_set():
                try:
                    response = send_resending_once(lambda: http.get(f"{gateway.rest_url}/v1/models/{MODEL}/metadata",
                                                                    headers={"x-api-key": gateway.key()}), resent)
                    if response.status_code != 200:
                        failures.append(f"rest: HTTP {response.status_code}")
                except httpx.HTTPError as exc:
                    failures.append(f"rest: {type(exc).__name__}: {exc}")
                sent["rest"] += 1

    def grpc_sdk() -> None:
        with GrpcClient(gateway.grpc_target, root_certificates=gateway.secrets.ca_cert, api_key=gateway.key(),
                        timeout=30) as client:
            while not stop.is_set():
                try:
                    client.predict(MODEL, inputs)
                except Exception as exc:  # noqa: BLE001 - every failure is counted
                    failures.append(f"grpc: {type(exc).__name__}: {exc}")
                sent["grpc"] += 1

    threads = [threading.Thread(target=target) for target in (rest, rest, grpc_sdk)]
    for thread in threads:
        thread.start()
    reloads = 0
    try:
        for weight in (10, 50, 0, 30, 0):
            routes.set_weight(MODEL, weight)
            reloads += 1
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    with capsys.disabled():
        print(f"\n{reloads} gateway reloads under load: {dict(sent)} requests, {len(failures)} failed "
              f"{failures[:3]}; {len(resent)} REST requests sent again after a reload closed their idle connection")
    assert sent["rest"] > 0 and sent["grpc"] > 0
    assert failures == []


def test_route_files_refuse_what_nginx_could_not_parse():
    with pytest.raises(ValueError, match="must match"):
        canary_route_files("a b", 10)
    with pytest.raises(ValueError, match=r"\[0, 100\]"):
        canary_route_files(MODEL, 101)
    assert "split_clients" not in "".join(canary_route_files(MODEL, 0).values())
    assert "10% canary" in "".join(canary_route_files(MODEL, 10).values())
