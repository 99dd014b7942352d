"""What the compose ``gateway`` service gives nginx for keys, limits and health (Compose's model; no engine).

The behaviour behind each is tested with Debian's nginx in test_keys, test_limits and test_health.
"""
from __future__ import annotations

import pytest

from gateway.certs import ACCESS_DIR
from serving.config.compose import load_compose_model
from tests.support.compose import CPU, PASSWORD, compose_env, dotenv

LOADTEST_AND_FAILED_AUTH = ("GATEWAY_LOADTEST_RATE", "GATEWAY_LOADTEST_CONN", "GATEWAY_FAILED_AUTH_RATE",
                            "GATEWAY_FAILED_AUTH_BURST")


@pytest.fixture(scope="module")
def gateway_service() -> dict:
    return load_compose_model(CPU, services=["gateway"], env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD))[
        "services"]["gateway"]


def test_the_access_folder_is_mounted_whole_so_a_rotated_map_shows_in_the_container(gateway_service):
    env = gateway_service["environment"]
    mounts = {v["target"]: v for v in gateway_service["volumes"]}
    access = mounts[f"{env['GATEWAY_SECRETS_DIR']}/{ACCESS_DIR}"]
    assert access["type"] == "bind" and access["read_only"] is True and access["source"].endswith(f"/{ACCESS_DIR}")
    assert not any(target.endswith(".map") for target in mounts)  # a single-file mount would pin the old inode


def test_the_entrypoint_starts_the_access_watcher_then_the_images_own_entrypoint(gateway_service):
    entrypoint = gateway_service["entrypoint"]
    mounts = {v["target"]: v for v in gateway_service["volumes"]}
    assert entrypoint[:2] == ["/bin/sh", "-c"]
    script = entrypoint[2]
    access = f"{gateway_service['environment']['GATEWAY_SECRETS_DIR']}/{ACCESS_DIR}"
    assert f"/etc/nginx/watch-access.sh {access} 1 " in script  # PID 1: nginx, once the entrypoint execs it
    # `compose config` prints the file's "$$@" escaped as written; the container's shell gets "$@".
    assert script.endswith('exec /docker-entrypoint.sh "$$@"')
    assert mounts["/etc/nginx/watch-access.sh"]["source"].endswith("gateway/watch-access.sh")
    assert gateway_service["command"][0] == "nginx"  # the image's entrypoint renders templates only for nginx


def test_the_healthcheck_asks_healthz_and_fails_on_an_error_status(gateway_service):
    test = gateway_service["healthcheck"]["test"]
    assert test[:2] == ["CMD", "curl"] and "-sfk" in test and test[-1] == "https://127.0.0.1:8501/healthz"


def test_the_loadtest_and_failed_key_limits_come_from_env(gateway_service):
    env, dot = gateway_service["environment"], dotenv()
    for name in LOADTEST_AND_FAILED_AUTH:
        assert env[name] == dot[name], name
    # High for the load-test class, low for guesses (.env says why).
    assert int(dot["GATEWAY_LOADTEST_RATE"].removesuffix("r/s")) >= 10 * int(dot["GATEWAY_RATE"].removesuffix("r/s"))
    assert int(dot["GATEWAY_LOADTEST_CONN"]) > int(dot["GATEWAY_CONN_PER_IP"])
    assert int(dot["GATEWAY_FAILED_AUTH_RATE"].removesuffix("r/s")) < int(dot["GATEWAY_RATE"].removesuffix("r/s"))
