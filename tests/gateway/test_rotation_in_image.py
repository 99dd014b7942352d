"""A rotation reaches the running compose gateway by itself: the gateway's stand-in image, started with the
compose service's own entrypoint, command, environment and mounts (only listen addresses, upstreams and
the secrets folder changed), re-reads ``access/`` after ``python -m gateway.certs rotate client``.

This is what the host-nginx tests cannot show: that the entrypoint line starts ``watch-access.sh`` and
still hands over to the image's entrypoint, that PID 1 is nginx, and that a map replaced by rename shows
through the folder's bind mount.
"""
from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid

import httpx
import pytest

from deploy.images.build import NGINX_IMAGE
from gateway.certs import init_secrets, main as certs_main
from serving.config.compose import load_compose_model
from serving.launcher import free_port, port_open
from serving.stack.docker import image_present, probe_engine
from tests.support.compose import CPU, PASSWORD, compose_env

pytestmark = [pytest.mark.slow, pytest.mark.docker]

STATUS = "/v1/models/digits"


@pytest.fixture
def image() -> str:
    engine = probe_engine()
    if not engine.answers:
        pytest.skip(engine.reason)
    if not image_present(NGINX_IMAGE):
        pytest.skip(f"image {NGINX_IMAGE} is not built (make images)")
    return NGINX_IMAGE


def docker_run(service: dict, env: dict[str, str], label: str, image: str) -> list[str]:
    command = ["docker", "run", "--rm", "--network", "host", "--label", label, "--read-only",
               "--tmpfs", "/tmp", "--user", f"{os.getuid()}:{os.getgid()}"]
    for volume in service["volumes"]:
        if volume["type"] == "bind":
            command += ["-v", f"{volume['source']}:{volume['target']}:ro"]
    for name, value in env.items():
        command += ["-e", f"{name}={value}"]
    shell, flag, script, name = service["entrypoint"]
    return [*command, "--entrypoint", shell, image, flag, script.replace("$$", "$"), name, *service["command"]]


def test_the_compose_gateway_reloads_a_rotated_key_by_itself(image, tf_serving, tmp_path):
    secrets = init_secrets(tmp_path / "secrets")
    service = load_compose_model(CPU, services=["gateway"], env=compose_env(
        GRAFANA_ADMIN_PASSWORD=PASSWORD, GATEWAY_SECRETS_HOST_DIR=str(secrets.directory)))["services"]["gateway"]
    ports = {"GATEWAY_GRPC_LISTEN": free_port(), "GATEWAY_REST_LISTEN": free_port(), "GATEWAY_MTLS_LISTEN": free_port()}
    env = {**service["environment"], **{k: f"127.0.0.1:{p}" for k, p in ports.items()},
           "GATEWAY_GRPC_UPSTREAM": tf_serving.grpc_target, "GATEWAY_REST_UPSTREAM": f"127.0.0.1:{tf_serving.rest_port}",
           "GATEWAY_RESOLVER": "127.0.0.1"}
    label = f"tfs-stack-test-rotation={uuid.uuid4().hex}"
    log = (tmp_path / "gateway.log").open("w")
    proc = subprocess.Popen(docker_run(service, env, label, image), stdout=log, stderr=subprocess.STDOUT)
    url = f"https://127.0.0.1:{ports['GATEWAY_REST_LISTEN']}"
    try:
        deadline = time.monotonic() + 60
        while not port_open(ports["GATEWAY_REST_LISTEN"]):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "gateway.log").read_text()
            threading.Event().wait(0.1)
        old = secrets.api_key("client")
        with httpx.Client(verify=str(secrets.ca_cert), timeout=30) as http:
            assert http.get(url + STATUS, headers={"x-api-key": old}).status_code == 200
        assert certs_main(["--out", str(secrets.directory), "rotate", "client"]) == 0
        rotated = time.monotonic()
        while True:  # the watcher looks every 2 s; a new connection reaches the new workers
            with httpx.Client(verify=str(secrets.ca_cert), timeout=30) as http:
                if http.get(url + STATUS, headers={"x-api-key": old}).status_code == 401:
                    break
            assert time.monotonic() - rotated < 20, (tmp_path / "gateway.log").read_text()
            threading.Event().wait(0.2)
        with httpx.Client(verify=str(secrets.ca_cert), timeout=30) as http:
            assert http.get(url + STATUS, headers={"x-api-key": secrets.api_key("client")}).status_code == 200
        assert "watch-access: /etc/nginx/secrets/access changed" in (tmp_path / "gateway.log").read_text()
    finally:
        left = subprocess.run(["docker", "ps", "-q", "--filter", f"label={label}"], capture_output=True, text=True)
        if left.stdout.split():
            subprocess.run(["docker", "stop", *left.stdout.split()], capture_output=True, timeout=60)
        proc.wait(60)
        log.close()
