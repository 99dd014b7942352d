"""``make up IMAGES=local`` on a real Docker engine: the compose stack a user runs, end to end.

The tests share one stack (conftest.py) and run in file order: what only
reads first, then the rollout, then the faults, then ``make down``
(``python -m serving.stack down``) and a restart.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import time

import httpx
import numpy as np
import pytest
import yaml

from exporter.manifest import load_manifest
from serving.checkout import REPO_ROOT
from serving.client import NO_RETRY, GrpcClient, RestClient
from serving.client.errors import PermissionDenied, TlsError, Unauthenticated
from tests.support.compose_stack import EXPORTED_IN_CONTAINER, SERVICES, Stack, docker
from tests.support.wait import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.slow]

MODEL = EXPORTED_IN_CONTAINER


def rule_groups(stack: Stack) -> list[dict]:
    """Every rule group of the rule files compose mounts into Prometheus."""
    return [g for path in sorted((stack.root / "monitoring" / "prometheus" / "rules").glob("*.yml"))
            for g in yaml.safe_load(path.read_text())["groups"]]


def services(stack: Stack) -> dict[str, dict]:
    """``service`` → its ``docker compose ps`` row (every container, exited ones too)."""
    out = stack.compose("ps", "-a", "--format", "json").stdout.strip()
    rows = json.loads(out) if out.startswith("[") else [json.loads(line) for line in out.splitlines() if line]
    return {row["Service"]: row for row in rows}


def answers(stack: Stack) -> bool:
    """The gateway answers a client's status call over gRPC with AVAILABLE."""
    try:
        with GrpcClient(stack.grpc_target, root_certificates=stack.secrets.cert("ca"),
                        api_key=stack.secrets.api_key("client"), retry=NO_RETRY, timeout=5) as client:
            return client.status(MODEL)[0].state == "AVAILABLE"
    except Exception:  # noqa: BLE001 - any failure is "not yet"
        return False


def client(stack: Stack, kind: str, **kwargs):
    kwargs.setdefault("root_certificates", stack.secrets.cert("ca"))
    kwargs.setdefault("api_key", stack.secrets.api_key("client"))
    make = GrpcClient if kind == "grpc" else RestClient
    return make(stack.grpc_target if kind == "grpc" else stack.rest_url, timeout=60, **kwargs)


def prometheus(stack: Stack, path: str, **params: str) -> dict:
    body = httpx.get(f"{stack.prometheus_url}/api/v1/{path}", params=params, timeout=10).json()
    assert body["status"] == "success", body
    return body["data"]


def test_make_up_took_the_compose_cpu_path_and_every_service_is_up(stack):
    assert "compose-cpu" in stack.up_output
    assert "\n  batching: " in stack.up_output and "\nStop: make down" in stack.up_output
    rows = services(stack)
    assert rows["exporter"]["State"] == "exited" and rows["exporter"]["ExitCode"] == 0, rows["exporter"]
    for name in ("tfserving", "gateway", "prometheus"):
        assert rows[name]["State"] == "running" and rows[name]["Health"] == "healthy", rows[name]
    assert "grafana" not in rows  # no Grafana image can be had here: not started (README)


def test_the_exporter_container_exported_into_models_as_the_stack_user(stack):
    user = stack.inspect("exporter")["Config"]["User"]
    uid, gid = (int(part) for part in user.split(":"))
    assert uid != 0 and gid != 0, user
    if os.getuid() != 0:
        assert (uid, gid) == (os.getuid(), os.getgid())
    assert uid != 1000 or os.getuid() == 1000, "HOST_UID was not set from the invoking user"
    version = stack.root / "models" / MODEL / "1"
    files = [version, *version.rglob("*")]
    assert (version / "saved_model.pb").is_file()
    assert {(p.stat().st_uid, p.stat().st_gid) for p in files} == {(uid, gid)}


@pytest.mark.parametrize("kind", ["grpc", "rest"])
def test_the_sdk_predicts_through_the_gateway_and_matches_the_goldens(stack, kind):
    manifest = load_manifest(stack.root / "models" / MODEL / "1")
    with client(stack, kind) as sdk:
        outputs = sdk.predict(MODEL, manifest.golden_inputs(), label="stable")
    for name, expected in manifest.golden_outputs().items():
        np.testing.assert_allclose(np.asarray(outputs[name]), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["grpc", "rest"])
def test_no_key_is_unauthenticated(stack, kind):
    with client(stack, kind, api_key=None, retry=NO_RETRY) as sdk, pytest.raises(Unauthenticated):
        sdk.status(MODEL)


def test_a_reload_with_a_client_key_is_permission_denied(stack):
    with client(stack, "grpc", retry=NO_RETRY) as sdk, pytest.raises(PermissionDenied):
        sdk.reload_config("model_config_list { }")


def test_the_mtls_port_serves_a_client_certificate_and_refuses_none(stack):
    target = f"127.0.0.1:{stack.mtls_port}"
    with GrpcClient(target, root_certificates=stack.secrets.cert("ca"), client_cert=stack.secrets.cert("client"),
                    client_key=stack.secrets.private_key("client"), timeout=30) as sdk:
        assert sdk.status(MODEL)[0].state == "AVAILABLE"
    with GrpcClient(target, root_certificates=stack.secrets.cert("ca"), retry=NO_RETRY, timeout=10) as sdk, \
            pytest.raises((Unauthenticated, TlsError)):
        sdk.status(MODEL)


def test_prometheus_scrapes_tfserving_and_loads_every_rule_group(stack):
    def tfserving_up() -> bool:
        result = prometheus(stack, "query", query='up{job="tfserving"}')["result"]
        return bool(result) and result[0]["value"][1] == "1"

    wait_until(tfserving_up, "Prometheus scraping tfserving:8501 (target up)", timeout=90, every=0.5)
    loaded = {g["name"] for g in prometheus(stack, "rules")["groups"]}
    assert loaded == {g["name"] for g in rule_groups(stack)}


def test_a_recording_rule_has_a_value_after_traffic(stack):
    manifest = load_manifest(stack.root / "models" / MODEL / "1")
    with client(stack, "grpc") as sdk:
        for _ in range(200):  # bounded traffic, spread over two scrapes below
            sdk.predict(MODEL, manifest.sample_inputs())
    recording = [r["record"] for g in rule_groups(stack) for r in g["rules"] if "record" in r]

    def some_rule_has_a_value() -> bool:
        with client(stack, "grpc") as sdk:
            sdk.predict(MODEL, manifest.sample_inputs())
        return any(prometheus(stack, "query", query=name)["result"] for name in recording)

    wait_until(some_rule_has_a_value, f"a value for one of the recording rules {recording}", timeout=120, every=5)


def test_every_service_runs_hardened(stack):
    rows = services(stack)
    for name in SERVICES:
        info = stack.inspect(name)
        host = info["HostConfig"]
        assert host["ReadonlyRootfs"] is True, name
        assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd"), name
        assert "no-new-privileges:true" in host["SecurityOpt"], name
        uid = info["Config"]["User"].split(":")[0]
        assert uid and uid not in ("0", "root"), (name, info["Config"]["User"])
        if rows[name]["State"] == "running":
            proc = docker("exec", info["Id"], "sh", "-c", "echo x > /written-by-test", check=False)
            assert proc.returncode != 0 and "Read-only file system" in proc.stderr, (name, proc.stderr)


def tracked_configs(stack: Stack) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((stack.root / "serving").glob("*.config"))}


def test_config_add_and_the_rollout_work_through_the_gateway_with_the_admin_key(stack):
    # The served config is in the work dir; serving/*.config stay the defaults (git status stays clean), and
    # no change restarts tfserving (its container's start time).
    defaults = tracked_configs(stack)
    assert defaults == {p.name: p.read_bytes() for p in sorted((REPO_ROOT / "serving").glob("*.config"))}
    tfserving_started = stack.inspect("tfserving")["State"]["StartedAt"]
    served = stack.root / ".cache" / "serving" / "compose" / "models.cpu.config"
    before = served.read_text()
    # A second model from the same files, added the README's way (stack.json holds the gateway and admin key).
    shutil.copytree(stack.root / "models" / MODEL, stack.root / "models" / "digits_copy")
    proc = stack.python("-m", "serving.config", "add", "digits_copy", "--base-path", "models/digits_copy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with client(stack, "rest") as sdk:
        assert sdk.status("digits_copy")[0].state == "AVAILABLE"
    # Version 2: published by the rollout (host TensorFlow), then canary, promote.
    for args in (("publish", "--model", MODEL), ("canary", "--model", MODEL, "--version", "2"),
                 ("promote", "--model", MODEL)):
        proc = stack.python("-m", "serving.rollout", *args, timeout=900)
        assert proc.returncode == 0, f"rollout {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    with client(stack, "grpc") as sdk:
        assert sdk.metadata(MODEL, label="stable").version == 2
    # And back: a canary of 1 (still on disk), rolled back.
    for args in (("canary", "--model", MODEL, "--version", "1"), ("rollback", "--model", MODEL)):
        proc = stack.python("-m", "serving.rollout", *args, timeout=900)
        assert proc.returncode == 0, f"rollout {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    with client(stack, "grpc") as sdk:
        assert sdk.metadata(MODEL, label="stable").version == 2
        assert [s.version for s in sdk.status(MODEL) if s.state == "AVAILABLE"] == [2]
    assert tracked_configs(stack) == defaults
    assert "digits_copy" in served.read_text() and served.read_text() != before
    assert stack.inspect("tfserving")["State"]["StartedAt"] == tfserving_started
    print(f"tfserving StartedAt {tfserving_started}, unchanged across config add, canary, promote, rollback")


def test_make_up_again_after_config_changes_neither_rebuilds_nor_restarts_tfserving(stack):
    info = stack.inspect("tfserving")
    proc = stack.make_up()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    again = stack.inspect("tfserving")
    assert (again["Id"], again["State"]["StartedAt"], again["Image"]) == (
        info["Id"], info["State"]["StartedAt"], info["Image"])


def test_logs_and_ps_come_from_what_make_up_recorded_and_every_log_is_rotated(stack):
    logs = stack.python("-m", "serving.stack", "logs", "tfserving", "--tail", "5")
    assert logs.returncode == 0 and "tfserving" in logs.stdout, logs.stdout + logs.stderr
    ps = stack.python("-m", "serving.stack", "ps")
    assert ps.returncode == 0 and "healthy" in ps.stdout, ps.stdout + ps.stderr
    for name in SERVICES:
        log = stack.inspect(name)["HostConfig"]["LogConfig"]
        assert log["Type"] == "json-file" and log["Config"].get("max-size") and log["Config"].get("max-file"), (
            name, log)


def test_prometheus_has_no_dcgm_exporter_job_on_the_cpu_stack(stack):
    targets = prometheus(stack, "targets")["activeTargets"]
    assert {t["labels"]["job"] for t in targets} == {"tfserving", "prometheus"}


def restarted(stack: Stack, service: str, count: int) -> bool:
    """``service``'s container has been restarted more than ``count`` times and is running again."""
    info = stack.inspect(service)
    return info["RestartCount"] > count and info["State"]["Running"]


def crash(stack: Stack, service: str) -> None:
    """SIGKILL to ``service``'s server process from the host: what an OOM kill or a segfault looks like.

    Not ``docker kill``: Docker takes that for a manual stop, and no restart policy applies to a
    container stopped by hand (measured here: RestartCount stays 0 under ``unless-stopped``).
    """
    os.kill(stack.inspect(service)["State"]["Pid"], signal.SIGKILL)


def healthy(stack: Stack, service: str) -> bool:
    return (stack.inspect(service)["State"].get("Health") or {}).get("Status") == "healthy"


def test_a_crashed_tfserving_comes_back_and_the_gateway_answers_without_a_restart(stack):
    gateway_started = stack.inspect("gateway")["State"]["StartedAt"]
    count = stack.inspect("tfserving")["RestartCount"]
    crash(stack, "tfserving")
    back = wait_until(lambda: restarted(stack, "tfserving", count), "tfserving restarted by its restart policy",
                      timeout=60, every=0.5)
    loaded = wait_until(lambda: healthy(stack, "tfserving"), "the restarted tfserving healthy", timeout=600, every=0.5)
    answered = wait_until(lambda: answers(stack), "the gateway answering again after tfserving came back",
                          timeout=30, every=0.5)
    print(f"tfserving: restarted {back:.1f} s after the kill, healthy {loaded:.1f} s later, "
          f"answered through the gateway {answered:.1f} s after that")
    assert stack.inspect("gateway")["State"]["StartedAt"] == gateway_started


def test_a_tfserving_on_a_new_address_is_found_without_a_gateway_restart(stack):
    """tfserving leaves the compose network and joins it again on another address, as a container
    recreated on a busy host would (without reloading every model a recreate would take)."""
    info = stack.inspect("tfserving")
    network, settings = next(iter(info["NetworkSettings"]["Networks"].items()))
    old_ip, aliases = settings["IPAddress"], [a for a in settings.get("Aliases") or [] if a != info["Id"][:12]]
    assert "tfserving" in aliases, aliases
    gateway_started = stack.inspect("gateway")["State"]["StartedAt"]
    docker("network", "disconnect", network, info["Id"])
    # Something else takes an address on the network meanwhile, so tfserving does not get its own back.
    holder = docker("run", "-d", "--rm", "--network", network, "tfs-stack-local/debian:bookworm",
                    "sleep", "600").stdout.strip()
    try:
        docker("network", "connect", *[a for alias in aliases for a in ("--alias", alias)], network, info["Id"])
        new_ip = stack.inspect("tfserving")["NetworkSettings"]["Networks"][network]["IPAddress"]
        assert new_ip and new_ip != old_ip
        took = wait_until(lambda: answers(stack), "the gateway answering tfserving on its new address",
                          timeout=30, every=0.5)
        print(f"tfserving {old_ip} -> {new_ip}: the gateway answered {took:.1f} s after the move")
        assert stack.inspect("gateway")["State"]["StartedAt"] == gateway_started
    finally:
        docker("rm", "-f", holder, check=False)


def test_a_crashed_gateway_comes_back_within_30_s(stack):
    count = stack.inspect("gateway")["RestartCount"]
    started = time.monotonic()
    crash(stack, "gateway")
    wait_until(lambda: restarted(stack, "gateway", count), "the gateway restarted by its restart policy",
               timeout=30, every=0.5)
    wait_until(lambda: answers(stack), "the restarted gateway answering", timeout=30 - (time.monotonic() - started))
    print(f"gateway: answering {time.monotonic() - started:.1f} s after the kill")


def test_prometheus_keeps_its_data_across_a_restart(stack):
    before = prometheus(stack, "query", query='up{job="tfserving"}[1h]')["result"]
    assert before and before[0]["values"], before
    first = before[0]["values"][0][0]
    docker("restart", stack.container("prometheus"))
    wait_until(lambda: _ready(stack), "prometheus ready after its restart", timeout=120, every=0.5)
    after = prometheus(stack, "query", query='up{job="tfserving"}[1h]')["result"]
    assert after and after[0]["values"][0][0] <= first


def _ready(stack: Stack) -> bool:
    try:
        return httpx.get(f"{stack.prometheus_url}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_down_then_make_up_keeps_the_models_the_config_and_the_labels(stack):
    # make down stops what make up recorded in stack.json (its files and project); again, nothing runs.
    down = stack.python("-m", "serving.stack", "down")
    assert down.returncode == 0 and "make down: stopped the compose-cpu stack" in down.stdout, down.stdout + down.stderr
    assert stack.compose("ps", "--all", "-q").stdout.split() == []
    again = stack.python("-m", "serving.stack", "down")
    assert again.returncode == 0 and "make down: nothing runs" in again.stdout, again.stdout + again.stderr
    started = time.monotonic()
    proc = stack.make_up()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(f"second make up IMAGES=local: {time.monotonic() - started:.1f} s")
    with client(stack, "grpc") as sdk:
        assert sdk.metadata(MODEL, label="stable").version == 2
        assert sdk.status("digits_copy")[0].state == "AVAILABLE"
    assert (stack.root / "models" / MODEL / "2").is_dir()


def test_a_stack_serving_only_a_users_model_stays_healthy_through_down_and_up(stack):
    """Every zoo model removed: only digits_copy (the user's) is served. tfserving's health asks for what
    is served, so make up --wait returns (healthy) after make down. Before: the check asked for digits."""
    config = stack.root / ".cache" / "serving" / "compose" / "models.cpu.config"
    from serving.config import load_model_server_config

    removed = [e.name for e in load_model_server_config(config).model_config_list.config if e.name != "digits_copy"]
    try:
        for name in removed:
            proc = stack.python("-m", "serving.config", "remove", name)
            assert proc.returncode == 0, proc.stdout + proc.stderr
        assert [e.name for e in load_model_server_config(config).model_config_list.config] == ["digits_copy"]
        assert stack.python("-m", "serving.stack", "down").returncode == 0
        proc = stack.make_up()
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert healthy(stack, "tfserving")
        with client(stack, "rest") as sdk:
            assert sdk.status("digits_copy")[0].state == "AVAILABLE"
    finally:  # the session's stack serves the zoo again for the tests after this one
        for name in removed:
            stack.python("-m", "serving.config", "add", name, "--base-path", f"models/{name}")
