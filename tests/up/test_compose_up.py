"""`make up` on a compose backend, without an engine: whom the containers run as, which host files
they get, which services `--images local` starts, and the command it runs.

The compose model is the real Compose binary's (offline). Where `compose up` would need an engine, a
stand-in `docker` (tests/up/conftest.py) records the call instead; nothing else is mocked. The
`checkout` fixture's copy of the compose files stands in for the checkout, so the host paths make up
creates and chowns are the test's own (except the dry runs, which change nothing).
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from serving.checkout import REPO_ROOT
from serving.config.compose import load_compose_model, volume_map
from serving.config.served_config import STATE_FILE, read_state
from serving.stack.cli import main
from serving.stack.compose import (
    NON_ROOT_ID,
    container_user,
    cpu_limits,
    host_paths,
    is_local_service,
    plan_compose,
    prepare_host_paths,
    with_dependencies,
)
from tests.support.docker_cli import SECRETS, environ, fake_docker_cli, set_environ

LOCAL_SERVICES = ["capture", "exporter", "gateway", "prometheus", "tfserving"]   # capture: built here, idle while CAPTURE=off
AS_ROOT = os.getuid() == 0


# --- HOST_UID / HOST_GID -------------------------------------------------------------------------------

def test_root_runs_the_containers_as_the_exporter_images_user():
    user = container_user({}, 0, 0)
    assert (user.uid, user.gid) == (NON_ROOT_ID, NON_ROOT_ID) == (10001, 10001)
    assert "root" in user.reason
    # exporter/Dockerfile's user: the fixed uid is the one the image was built for.
    assert f"--uid {NON_ROOT_ID}" in (REPO_ROOT / "exporter" / "Dockerfile").read_text()


def test_any_other_user_runs_them_as_itself():
    user = container_user({}, 1234, 1235)
    assert (user.uid, user.gid) == (1234, 1235)
    assert user.env() == {"HOST_UID": "1234", "HOST_GID": "1235"}


@pytest.mark.parametrize("uid, exported, expected", [
    (1234, {"HOST_UID": "4321"}, (4321, 1234)),
    (1234, {"HOST_UID": "4321", "HOST_GID": "4322"}, (4321, 4322)),
    (0, {"HOST_GID": "4322"}, (NON_ROOT_ID, 4322)),
])
def test_exported_host_uid_and_gid_win(uid, exported, expected):
    user = container_user(exported, uid, uid)
    assert (user.uid, user.gid) == expected
    assert "from the environment" in user.reason


@pytest.mark.parametrize("exported, rule", [
    ({"HOST_UID": "0"}, "no container of the stack runs as root"),
    ({"HOST_GID": "staff"}, "HOST_GID='staff': must be a numeric id"),
])
def test_an_exported_root_or_non_numeric_id_is_refused(exported, rule):
    with pytest.raises(ValueError, match=rule):
        container_user(exported, 1234, 1234)


# --- host files ----------------------------------------------------------------------------------------

def test_as_root_the_model_repository_and_the_mounted_gateway_secrets_are_chowned(checkout):
    plan = plan_compose("compose-cpu", "local", checkout, environ(), 0, 0)
    paths = {p.path: p for p in host_paths(plan, checkout)}
    model_repo = volume_map(plan.services["tfserving"])["/models"]
    assert model_repo == volume_map(plan.services["exporter"])["/models"] == checkout / "models"
    secrets = checkout / "gateway" / "secrets"
    # The model repository (written by the exporter) and only the secrets the gateway mounts:
    # ca.key and the clients' keys stay the host user's.
    assert sorted(paths) == sorted([model_repo, *(secrets / n for n in SECRETS)])
    assert paths[model_repo].directory and not paths[secrets / "server.key"].directory
    assert {(p.uid, p.gid) for p in paths.values()} == {(NON_ROOT_ID, NON_ROOT_ID)}


def test_every_writable_bind_mount_directory_under_the_checkout_is_created(checkout, tmp_path):
    """An override (like a cache mount) adds bind mounts: only writable ones under the checkout count."""
    override = checkout / "docker-compose.extra.yml"
    override.write_text(f"""services:
  exporter:
    volumes: [./.cache/kernels:/cache, ./.cache/read-only:/ro:ro, {tmp_path}/outside:/outside]
  tfserving:
    volumes: [./.cache/tfserving:/var/cache/tfs]
""")
    plan = plan_compose("compose-cpu", "upstream", checkout, environ(HOST_UID="4321", HOST_GID="4322"), 1234, 1234)
    files = [*plan.files, override]
    plan = dataclasses.replace(plan, files=files, services=load_compose_model(
        files, env={**plan.env, "GRAFANA_ADMIN_PASSWORD": "test-only"}, project_dir=checkout)["services"])
    dirs = {p.path: (p.uid, p.gid) for p in host_paths(plan, checkout) if p.directory}
    assert dirs == {checkout / "models": (4321, 4322), checkout / ".cache" / "kernels": (4321, 4322),
                    checkout / ".cache" / "tfserving": (4321, 4322)}
    done = prepare_host_paths(host_paths(plan, checkout), as_root=False)
    assert all(path.is_dir() for path in dirs)
    assert not (checkout / ".cache" / "read-only").exists() and not (tmp_path / "outside").exists()
    assert f"create {checkout / '.cache' / 'kernels'}" in done


@pytest.mark.skipif(not AS_ROOT, reason="chown to another user needs root")
def test_prepare_chowns_recursively_and_keeps_the_keys_mode(checkout):
    (checkout / "models" / "digits" / "1").mkdir(parents=True)
    (checkout / "models" / "digits" / "1" / "saved_model.pb").write_bytes(b"")
    plan = plan_compose("compose-cpu", "local", checkout, environ(), 0, 0)
    prepare_host_paths(host_paths(plan, checkout), as_root=True)
    owned = [checkout / "models", checkout / "models" / "digits" / "1" / "saved_model.pb",
             checkout / "gateway" / "secrets" / "server.key"]
    assert {(p.stat().st_uid, p.stat().st_gid) for p in owned} == {(NON_ROOT_ID, NON_ROOT_ID)}
    assert (checkout / "gateway" / "secrets" / "server.key").stat().st_mode & 0o777 == 0o600
    assert (checkout / "gateway" / "secrets" / "ca.key").stat().st_uid == 0


# --- --images local ------------------------------------------------------------------------------------

def test_local_images_start_only_the_services_that_have_one(checkout):
    plan = plan_compose("compose-cpu", "local", checkout, environ(), 1234, 1234)
    assert plan.named == plan.started == LOCAL_SERVICES
    assert [f.name for f in plan.files] == ["docker-compose.yml", "docker-compose.cpu.yml",
                                            "docker-compose.local.yml"]
    assert any("no local image for dcgm-exporter, grafana (not started)" in note for note in plan.notes)
    # Grafana is not started: its required password is a placeholder for compose's interpolation.
    assert plan.env["GRAFANA_ADMIN_PASSWORD"]
    tail = ["-f", str(checkout / "docker-compose.local.yml"), "up", "-d", "--build", "--wait", *LOCAL_SERVICES]
    assert plan.command()[-len(tail):] == tail


def test_local_images_on_a_gpu_host_stay_on_the_cpu_files(checkout):
    plan = plan_compose("compose-gpu", "local", checkout, environ(), 1234, 1234)
    assert plan.backend == "compose-cpu" and plan.profiles == []
    assert checkout / "docker-compose.cpu.yml" in plan.files
    assert any("CPU-only" in note for note in plan.notes)


def test_upstream_images_start_everything_and_need_the_grafana_password(checkout):
    plan = plan_compose("compose-gpu", "upstream", checkout, environ(), 1234, 1234)
    assert plan.named == [] and "grafana" in plan.started and plan.profiles == ["gpu-metrics"]
    assert "dcgm-exporter" in plan.started  # its profile is on
    assert "GRAFANA_ADMIN_PASSWORD" not in plan.env


def test_a_service_is_local_by_its_image_name_or_its_local_base_images():
    assert is_local_service({"image": "tfs-stack-local/nginx:1.30-forky"})
    assert not is_local_service({"image": "grafana/grafana:11.6.0"})
    assert is_local_service({"build": {"args": {"BASE_IMAGE": "tfs-stack-local/tensorflow:2.17.1",
                                                "TF_VERSION": "2.17.1"}}, "image": "tfs-stack-exporter:2.17.1"})
    assert not is_local_service({"build": {"args": {"BASE_IMAGE": "tensorflow/tensorflow:2.17.1"}}})
    assert not is_local_service({"build": {"context": "."}})  # the Dockerfile's own FROM: not known local
    services = {"a": {"depends_on": {"b": {}}}, "b": {"depends_on": {"c": {}}}, "c": {}, "d": {}}
    assert with_dependencies(services, ["a"]) == ["a", "b", "c"]


# --- the command line ----------------------------------------------------------------------------------

def run_up(*args: str, env: dict[str, str], work_dir: Path) -> subprocess.CompletedProcess:
    """``make up`` in the checkout with a work dir of the test's own: a real ``make up`` that an engine test runs
    at the same time holds the checkout's (``make up: another make up ... holds``)."""
    return subprocess.run([sys.executable, "-m", "serving.stack", *args, "--work-dir", str(work_dir)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("exported, ids", [
    ({}, (NON_ROOT_ID, NON_ROOT_ID) if AS_ROOT else (os.getuid(), os.getgid())),
    ({"HOST_UID": "4321", "HOST_GID": "4322"}, (4321, 4322)),
])
def test_dry_run_prints_the_compose_command_and_the_ids(tmp_path, exported, ids):
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    for name in SECRETS:
        (secrets / name).write_text("test\n")
    before = {p: p.stat().st_uid for p in [*secrets.iterdir(), REPO_ROOT / "models"]}
    proc = run_up("--dry-run", "--backend", "compose-cpu", "--images", "local",
                  env=environ(GATEWAY_SECRETS_HOST_DIR=str(secrets), **exported), work_dir=tmp_path / "work")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "make up: compose-cpu: --backend compose-cpu"
    assert f"make up: containers run as {ids[0]}:{ids[1]} (HOST_UID/HOST_GID): " in proc.stdout
    command = next(line for line in lines if line.startswith("+ "))
    assert command.startswith(f"+ HOST_UID={ids[0]} HOST_GID={ids[1]} ") and " GRAFANA_ADMIN_PASSWORD=" in command
    assert command.endswith(f"-f {REPO_ROOT}/docker-compose.cpu.yml -f {REPO_ROOT}/docker-compose.local.yml "
                            f"up -d --build --wait {' '.join(LOCAL_SERVICES)}")
    assert {p: p.stat().st_uid for p in before} == before  # a dry run changes nothing


def test_local_images_missing_say_make_images(checkout, tmp_path, monkeypatch, capsys):
    fake = fake_docker_cli(tmp_path / "bin", tmp_path / "calls", images=False)
    set_environ(monkeypatch, PATH=f"{fake.parent}:{os.environ['PATH']}")
    assert main(["--backend", "compose-cpu", "--images", "local", "--work-dir", str(tmp_path / "work")],
                root=checkout) == 2
    err = capsys.readouterr().err
    assert "local images missing: tfs-stack-local/" in err and "make images" in err
    assert not (tmp_path / "calls").exists()


def test_local_images_run_compose_write_the_state_and_leave_grafana_out_of_the_banner(checkout, tmp_path,
                                                                                      monkeypatch, capsys):
    """The ports come from the environment over .env (Compose reads the process environment first)."""
    calls = tmp_path / "calls"
    fake = fake_docker_cli(tmp_path / "bin", calls)
    set_environ(monkeypatch, PATH=f"{fake.parent}:{os.environ['PATH']}", GATEWAY_GRPC_PORT="18500",
                GATEWAY_REST_PORT="18501", PROMETHEUS_PORT="19090")
    work = tmp_path / "work"
    assert main(["--backend", "compose-cpu", "--images", "local", "--work-dir", str(work)], root=checkout) == 0
    assert calls.read_text().split()[-len(LOCAL_SERVICES) - 1:] == ["--wait", *LOCAL_SERVICES]
    out = capsys.readouterr().out
    assert "Serving through the gateway: gRPC 127.0.0.1:18500, REST https://127.0.0.1:18501" in out
    assert "Prometheus: http://127.0.0.1:19090" in out and "Grafana:" not in out
    state = read_state(work / STATE_FILE)
    assert (state.backend, state.grpc, state.rest) == ("compose-cpu", "127.0.0.1:18500", "https://127.0.0.1:18501")
    assert state.model_repo == checkout / "models" and (checkout / "models").is_dir()
    assert (state.compose_env["GATEWAY_GRPC_PORT"], state.compose_env["TFS_CONFIG_HOST_DIR"]) == (
        "18500", str(work / "compose"))
    assert "GRAFANA_ADMIN_PASSWORD" not in state.compose_env
    # Prometheus gets the jobs of what runs: no dcgm-exporter job on the CPU stack (before: down for good).
    scrape = yaml.safe_load(Path(state.compose_env["PROMETHEUS_CONFIG_HOST_FILE"]).read_text())
    assert [j["job_name"] for j in scrape["scrape_configs"]] == ["tfserving", "prometheus"]
    assert scrape["rule_files"] == ["rules/*.yml"]
    banner = out[out.index("Serving through the gateway"):]
    assert "server log: make logs SERVICE=tfserving" in banner and "docker compose" not in banner


def test_compose_serves_a_config_in_the_work_dir_seeded_once_from_the_tracked_default(checkout, tmp_path,
                                                                                       monkeypatch):
    """The served config lives in <work dir>/compose (mounted as /etc/tfserving); serving/*.config stay the
    defaults. Before: stack.json named serving/models.cpu.config, which serving.config add rewrote."""
    fake = fake_docker_cli(tmp_path / "bin", tmp_path / "calls")
    set_environ(monkeypatch, PATH=f"{fake.parent}:{os.environ['PATH']}")
    work, defaults = tmp_path / "work", checkout / "serving"
    tracked = {p.name: p.read_bytes() for p in defaults.glob("*.config")}
    assert main(["--backend", "compose-cpu", "--images", "local", "--work-dir", str(work)], root=checkout) == 0
    state = read_state(work / STATE_FILE)
    served = work / "compose" / "models.cpu.config"
    assert state.models_config == served and served.read_bytes() == tracked["models.cpu.config"]
    assert (work / "compose" / "monitoring.config").read_bytes() == tracked["monitoring.config"]
    # The served config is the operator's from now on; the other files follow their defaults.
    served.write_text("model_config_list {\n}\n")
    (defaults / "monitoring.config").write_text((defaults / "monitoring.config").read_text() + "\n# changed\n")
    assert main(["--backend", "compose-cpu", "--images", "local", "--work-dir", str(work)], root=checkout) == 0
    assert served.read_text() == "model_config_list {\n}\n"
    assert (work / "compose" / "monitoring.config").read_bytes() == (defaults / "monitoring.config").read_bytes()
    assert {p.name: p.read_bytes() for p in defaults.glob("*.config") if p.name != "monitoring.config"} == {
        k: v for k, v in tracked.items() if k != "monitoring.config"}
    # tfserving mounts that directory; the banner names no model when none is served.
    model = load_compose_model([checkout / "docker-compose.yml", checkout / "docker-compose.cpu.yml"],
                               env={**environ(GRAFANA_ADMIN_PASSWORD="x"), **state.compose_env}, project_dir=checkout)
    assert volume_map(model["services"]["tfserving"])["/etc/tfserving"] == work / "compose"


def test_the_certs_hint_keeps_images_local(checkout, tmp_path, monkeypatch, capsys):
    """Before: the hint said `make certs && make up`, and plain make up then tried to pull upstream images."""
    fake = fake_docker_cli(tmp_path / "bin", tmp_path / "calls")
    set_environ(monkeypatch, PATH=f"{fake.parent}:{os.environ['PATH']}")
    for name in SECRETS:
        (checkout / "gateway" / "secrets" / name).unlink()
    assert main(["--backend", "compose-cpu", "--images", "local", "--work-dir", str(tmp_path / "w")], root=checkout) == 2
    assert "make certs && make up IMAGES=local" in capsys.readouterr().err
    monkeypatch.setenv("GRAFANA_ADMIN_PASSWORD", "x")
    assert main(["--backend", "compose-cpu", "--work-dir", str(tmp_path / "w")], root=checkout) == 2
    assert capsys.readouterr().err.rstrip().endswith("make certs && make up")


def test_a_pull_that_no_registry_answers_names_the_local_images(checkout, tmp_path, monkeypatch, capsys):
    """compose's own error (a name lookup of the registry) is followed by what to do. Before: the raw
    registry error alone."""
    calls = tmp_path / "calls"
    fake = fake_docker_cli(tmp_path / "bin", calls)
    fake.write_text(fake.read_text().replace(
        'echo "$*" >> ' + str(calls) + '; exit 0',
        'echo "$*" >> ' + str(calls) + '; echo "Error response from daemon: Get \\"https://registry-1.docker.io/v2/\\": '
        'dial tcp: lookup registry-1.docker.io: no such host"; exit 18'))
    set_environ(monkeypatch, PATH=f"{fake.parent}:{os.environ['PATH']}", GRAFANA_ADMIN_PASSWORD="x")
    assert main(["--backend", "compose-cpu", "--work-dir", str(tmp_path / "w")], root=checkout) == 18
    captured = capsys.readouterr()
    assert "no such host" in captured.out
    assert "no registry answered" in captured.err and "make images && make up IMAGES=local" in captured.err


def test_local_images_without_an_engine_are_refused_not_embedded(tmp_path):
    docker = tmp_path / "docker"
    docker.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2; exit 1\n")
    docker.chmod(0o755)
    proc = run_up("--dry-run", "--images", "local", "--docker", str(docker), env=environ(), work_dir=tmp_path / "work")
    assert proc.returncode == 2
    assert proc.stdout.startswith("make up: embedded: ") and "needs a Docker engine" in proc.stderr


def test_cpu_limits_above_the_hosts_cpus_are_capped_unless_exported(checkout):
    limits = cpu_limits(checkout, {}, 2)
    env_file = (checkout / ".env").read_text()
    asked = {line.split("=")[0]: float(line.split("=")[1]) for line in env_file.splitlines()
             if line.split("=")[0].endswith("_CPUS")}
    assert limits == {name: "2" for name, value in asked.items() if value > 2}
    assert limits, "the .env of the checkout asks for more than 2 CPUs somewhere (TFS_CPUS=4)"
    assert cpu_limits(checkout, {"TFS_CPUS": "4"}, 2).get("TFS_CPUS") is None
    assert cpu_limits(checkout, {}, 64) == {}


def test_the_gpu_stacks_cuda_caches_are_created_though_compose_would_not(checkout):
    plan = plan_compose("compose-gpu", "upstream", checkout, environ(GRAFANA_ADMIN_PASSWORD="x"), 1234, 1234)
    created = {p.path.relative_to(checkout) for p in host_paths(plan, checkout) if p.directory}
    assert {Path(".cache/cuda/tfserving"), Path(".cache/cuda/exporter")} <= created
    for service in ("tfserving", "exporter"):
        (cache,) = [v for v in plan.services[service]["volumes"] if v["target"] == "/var/cache/cuda"]
        assert not (cache.get("bind") or {}).get("create_host_path")  # compose refuses it missing: make up makes it


def test_make_up_writes_grafanas_password_file_from_the_environment(checkout, tmp_path, monkeypatch):
    """Grafana reads its password from a compose secret file (never an environment variable of the container)."""
    fake = fake_docker_cli(tmp_path / "bin", tmp_path / "calls")
    set_environ(monkeypatch, PATH=f"{fake.parent}:{os.environ['PATH']}", GRAFANA_ADMIN_PASSWORD="test-only-password")
    assert main(["--backend", "compose-cpu", "--images", "upstream", "--work-dir", str(tmp_path / "work")],
                root=checkout) == 0
    assert (checkout / "gateway" / "secrets" / "grafana-admin-password").read_text() == "test-only-password"
    assert "test-only-password" not in (tmp_path / "calls").read_text()
