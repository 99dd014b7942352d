"""The compose ``gateway`` service on Compose's model: the only published way to TF Serving.

What nginx does with the templates is tested with Debian's nginx in tests/gateway/;
here: the wiring (ports, upstreams, templates, secrets) that the container would get.
"""
from __future__ import annotations

import pytest

from gateway import SECRET_FILES, TEMPLATES, template_variables
from gateway.certs import init_secrets
from serving.checkout import REPO_ROOT
from serving.config.compose import load_compose_model, volume_map
from serving.stack.cli import main as make_up
from serving.stack.compose import missing_gateway_files
from tests.support.compose import CPU, PASSWORD, compose_env, dotenv, flags


@pytest.fixture(params=["gpu", "cpu"])
def services(request, gpu_model, cpu_model) -> dict:
    return (gpu_model if request.param == "gpu" else cpu_model)["services"]


def test_tf_serving_publishes_no_port_and_the_gateway_does(services):
    assert "ports" not in services["tfserving"] or services["tfserving"]["ports"] == []
    published = {p["target"]: int(p["published"]) for p in services["gateway"]["ports"]}
    env = dotenv()
    assert published == {8500: int(env["GATEWAY_GRPC_PORT"]), 8501: int(env["GATEWAY_REST_PORT"]),
                         8443: int(env["GATEWAY_MTLS_PORT"])}
    assert {p["host_ip"] for p in services["gateway"]["ports"]} == {"127.0.0.1"}


def test_the_gateway_listens_where_it_publishes_and_forwards_to_tf_servings_ports(services):
    env = services["gateway"]["environment"]
    targets = {p["target"] for p in services["gateway"]["ports"]}
    listens = {int(env[k]) for k in ("GATEWAY_GRPC_LISTEN", "GATEWAY_REST_LISTEN", "GATEWAY_MTLS_LISTEN")}
    assert listens == targets and min(listens) > 1024  # no privileged port: nginx runs as the host user
    command = flags(services["tfserving"]["command"])
    assert env["GATEWAY_GRPC_UPSTREAM"] == f"tfserving:{command['port']}"
    assert env["GATEWAY_REST_UPSTREAM"] == f"tfserving:{command['rest_api_port']}"
    assert services["gateway"]["depends_on"]["tfserving"]["condition"] == "service_healthy"
    # The names are looked up again while nginx runs (gateway/nginx.conf.template), through Docker's
    # embedded DNS: the only resolver that knows the compose service names.
    assert env["GATEWAY_RESOLVER"] == "127.0.0.11"


def test_the_image_renders_the_repository_templates_with_only_the_gateway_variables(services):
    gateway = services["gateway"]
    env = gateway["environment"]
    mounts = {v["target"]: v for v in gateway["volumes"]}
    for name in TEMPLATES:
        mount = mounts[f"/etc/nginx/templates/{name}"]
        assert mount["source"] == str(REPO_ROOT / "gateway" / name) and mount["read_only"] is True
    # The entrypoint's envsubst substitutes only GATEWAY_* (nginx's $variables stay) into a tmpfs.
    assert env["NGINX_ENVSUBST_FILTER"] == "GATEWAY_"
    out = env["NGINX_ENVSUBST_OUTPUT_DIR"]
    assert gateway["command"] == ["nginx", "-c", f"{out}/nginx.conf"]
    assert any(t.split(":")[0] == out for t in gateway["tmpfs"])
    assert any(t.split(":")[0] == env["GATEWAY_RUN_DIR"] for t in gateway["tmpfs"])
    named = set().union(*(template_variables((REPO_ROOT / "gateway" / n).read_text()) for n in TEMPLATES))
    assert named == {k for k in env if k.startswith("GATEWAY_")}


def test_secrets_are_mounted_read_only_file_by_file_and_never_created(services):
    gateway = services["gateway"]
    env = gateway["environment"]
    mounts = {v["target"]: v for v in gateway["volumes"]}
    secret_mounts = {t: v for t, v in mounts.items() if t.startswith(env["GATEWAY_SECRETS_DIR"] + "/")}
    assert set(secret_mounts) == {f"{env['GATEWAY_SECRETS_DIR']}/{name}" for name in SECRET_FILES}
    host_dir = (REPO_ROOT / dotenv()["GATEWAY_SECRETS_HOST_DIR"]).resolve()
    for target, mount in secret_mounts.items():
        assert mount["type"] == "bind" and mount["read_only"] is True, target
        # Long syntax without create_host_path: Docker refuses a missing file instead of making a directory.
        assert not (mount.get("bind") or {}).get("create_host_path"), target
        assert mount["source"] == str(host_dir / target.rsplit("/", 1)[1])
    assert "ca.key" not in {t.rsplit("/", 1)[1] for t in secret_mounts}


def test_make_up_refuses_the_compose_stack_without_the_files_of_make_certs(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "no-secrets"
    env = compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD, GATEWAY_SECRETS_HOST_DIR=str(empty))
    services = load_compose_model(CPU, env=env)["services"]
    assert sorted(p.name for p in missing_gateway_files(services)) == sorted(SECRET_FILES)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert make_up(["--backend", "compose-cpu"]) == 2  # before any `docker compose up`
    assert "make certs" in capsys.readouterr().err
    init_secrets(tmp_path / "secrets")
    env["GATEWAY_SECRETS_HOST_DIR"] = str(tmp_path / "secrets")
    assert missing_gateway_files(load_compose_model(CPU, env=env)["services"]) == []
    assert set(volume_map(load_compose_model(CPU, env=env)["services"]["gateway"]).values()) >= {
        tmp_path / "secrets" / name for name in SECRET_FILES}
