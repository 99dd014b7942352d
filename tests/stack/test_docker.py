"""``serving.stack.docker``: the one Docker probe, TF Serving's image name, and TF Serving's one ``docker run``.

The unit tests ask a stand-in ``docker`` executable (a shell script on a temp
path that prints canned answers and logs every call): the real engine's
answers (no engine, a hung engine, the nvidia runtime, an image being
present) cannot be chosen here. The tests marked ``docker`` ask the real
engine of this host (skipped with the reason where none answers).
"""
from __future__ import annotations

import os
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest

from serving.checkout import REPO_ROOT
from serving.config.compose import load_compose_model
from serving.stack import docker as stack_docker
from serving.stack.docker import (
    CONTAINER_LABEL,
    Mount,
    TFServingUnavailable,
    docker_run_argv,
    image_present,
    probe_engine,
    run_tf_serving,
    tfserving_image,
    tfserving_unavailable,
)

RUNTIMES = '{"io.containerd.runc.v2":{"path":"runc"},"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}}'
NO_DAEMON = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
TFS = "tensorflow/serving:2.17.1"


def stand_in(tmp_path: Path, cases: str) -> tuple[str, Path]:
    """A `docker` that logs its arguments to calls.log and answers by ``case "$1 $2"`` (``cases``)."""
    calls = tmp_path / "calls.log"
    path = tmp_path / "bin" / "docker"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "$@" >> {calls}\ncase "$1 $2" in\n{cases}\n'
                    '*) echo "stand-in docker: unexpected call: $*" >&2; exit 64 ;;\nesac\n')
    path.chmod(0o755)
    return str(path), calls


ENGINE = f"\"info \"*) echo '{RUNTIMES}' ;;"
HAS_TFS = f'"image inspect") [ "$5" = {TFS} ] && echo sha256:1 && exit 0; echo "Error: No such image: $5" >&2; exit 1 ;;'


def test_the_public_api_is_pinned():
    assert stack_docker.__all__ == ["Engine", "Mount", "TFServingContainer", "TFServingUnavailable",
                                    "probe_engine", "image_id", "image_label", "image_present", "image_absent_reason", "tfserving_image",
                                    "tfserving_unavailable", "docker_run_argv", "run_tf_serving"]
    assert all(hasattr(stack_docker, name) for name in stack_docker.__all__)


def test_no_docker_command_means_no_engine():
    engine = probe_engine("/nonexistent/docker")
    assert (engine.answers, engine.cli, engine.reason) == (False, None, "no `/nonexistent/docker` command on PATH")
    assert tfserving_unavailable(TFS, "/nonexistent/docker") == \
        "real TF Serving not run: no `/nonexistent/docker` command on PATH"


def test_a_daemon_that_does_not_answer_is_no_engine_with_its_words(tmp_path):
    docker, _ = stand_in(tmp_path, f'"info "*) echo "{NO_DAEMON}" >&2; exit 1 ;;')
    engine = probe_engine(docker)
    assert not engine.answers and engine.runtimes == frozenset()
    assert engine.reason == f"no Docker engine answers (`{docker} info`: {NO_DAEMON})"


def test_a_hung_engine_is_given_up_on_after_the_timeout(tmp_path):
    docker, _ = stand_in(tmp_path, '"info "*) exec sleep 30 ;;')
    engine = probe_engine(docker, timeout=0.5)
    assert not engine.answers and engine.reason == f"`{docker} info` did not answer within 0.5 s"


def test_an_engine_reports_its_runtimes(tmp_path):
    docker, calls = stand_in(tmp_path, ENGINE)
    engine = probe_engine(docker)
    assert engine.answers and engine.reason == "a Docker engine answers"
    assert engine.runtimes == {"io.containerd.runc.v2", "nvidia", "runc"}
    assert calls.read_text() == "info --format {{json .Runtimes}}\n"


def test_unreadable_runtimes_still_mean_an_engine(tmp_path):
    docker, _ = stand_in(tmp_path, '"info "*) echo "not json" ;;')
    engine = probe_engine(docker)
    assert engine.answers and engine.runtimes == frozenset()
    assert engine.reason == "a Docker engine answers (runtimes unreadable)"


def test_image_presence_is_image_inspect_never_a_pull(tmp_path):
    docker, calls = stand_in(tmp_path, ENGINE + "\n" + HAS_TFS)
    assert image_present(TFS, docker)
    assert not image_present("tensorflow/serving:2.17.1-gpu", docker)
    assert calls.read_text().splitlines() == [f"image inspect --format {{{{.Id}}}} {TFS}",
                                              "image inspect --format {{.Id}} tensorflow/serving:2.17.1-gpu"]


def test_an_absent_image_is_the_reason_and_nothing_is_pulled_or_run(tmp_path):
    docker, calls = stand_in(tmp_path, ENGINE + '\n"image inspect") echo "Error: No such image: $5" >&2; exit 1 ;;')
    assert tfserving_unavailable(TFS, docker) == (
        f"real TF Serving not run: image {TFS} is not present locally and is never pulled "
        f"(`docker pull {TFS}` on a host that reaches a registry, or `docker load` it here)")
    with pytest.raises(TFServingUnavailable, match="is not present locally and is never pulled"):
        run_tf_serving(["--model_name=m"], image=TFS, docker=docker)
    assert [line.split()[0] for line in calls.read_text().splitlines()] == ["info", "image"] * 2


def test_docker_run_never_pulls_and_publishes_on_loopback():
    argv = docker_run_argv(TFS, ["--model_name=m"], name="n", mounts=[Mount(Path("/srv/m"), "/models/m"),
                                                                      Mount(Path("/srv/w"), "/w", read_only=False)],
                           gpu=True, grpc_port=9000)
    assert argv == ["docker", "run", "--detach", "--pull=never", "--name", "n", "--label", CONTAINER_LABEL,
                    "--publish", "127.0.0.1:9000:8500", "--publish", "127.0.0.1::8501",
                    "--volume", "/srv/m:/models/m:ro", "--volume", "/srv/w:/w", "--gpus", "all",
                    "--entrypoint", "tensorflow_model_server", TFS, "--port=8500", "--rest_api_port=8501",
                    "--model_name=m"]


def test_run_tf_serving_returns_the_published_endpoint_and_stop_removes_it(tmp_path):
    docker, calls = stand_in(tmp_path, "\n".join([
        ENGINE, HAS_TFS,
        '"run "*) echo 0123abcd ;;',
        '"port "*) [ "$3" = 8500/tcp ] && echo 127.0.0.1:49153 || echo 127.0.0.1:49154 ;;',
        '"inspect "*) echo true ;;',
        '"rm "*) echo "$3" ;;']))
    container = run_tf_serving(["--model_name=m"], image=TFS, docker=docker)
    assert (container.grpc_target, container.rest_url) == ("127.0.0.1:49153", "http://127.0.0.1:49154")
    assert container.running() and container.pid is None
    name = container.name
    assert name.startswith("tfs-stack-tfserving-")
    with container:
        pass
    assert calls.read_text().splitlines()[-1] == f"rm --force {name}"
    assert not [line for line in calls.read_text().splitlines() if line.startswith("pull")]


def test_a_container_that_exits_while_loading_is_removed_and_its_log_shown(tmp_path):
    docker, calls = stand_in(tmp_path, "\n".join([
        ENGINE, HAS_TFS,
        '"run "*) echo 0123abcd ;;',
        '"port "*) echo 127.0.0.1:1 ;;',   # nothing listens on port 1: the model never answers
        '"inspect "*) echo false ;;',
        '"logs "*) echo "Failed to start server. Error: NOT_FOUND: no servable" ;;',
        '"rm "*) echo "$3" ;;']))
    with pytest.raises(RuntimeError, match=r"(?s)exited while loading m.*NOT_FOUND: no servable"):
        run_tf_serving(["--model_name=m"], image=TFS, docker=docker, wait_for=["m"])
    assert calls.read_text().splitlines()[-1].startswith("rm --force tfs-stack-tfserving-")


def test_a_failed_docker_run_removes_what_it_created(tmp_path):
    docker, calls = stand_in(tmp_path, "\n".join([
        ENGINE, HAS_TFS,
        '"run "*) echo \'exec: "tensorflow_model_server": executable file not found in $PATH\' >&2; exit 127 ;;',
        '"rm "*) echo "$3" ;;']))
    with pytest.raises(RuntimeError, match="`docker run` of tensorflow/serving:2.17.1 failed: exec: "):
        run_tf_serving([], image=TFS, docker=docker)
    assert calls.read_text().splitlines()[-1].startswith("rm --force tfs-stack-tfserving-")


def _env_pin(name: str) -> str:
    pairs = (line.split("=", 1) for line in (REPO_ROOT / ".env").read_text().splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, v in pairs if not k.startswith("#")}[name]


def test_the_image_is_the_compose_tfserving_image_of_the_env_pin():
    assert tfserving_image() == f"tensorflow/serving:{_env_pin('TF_SERVING_VERSION')}"
    assert tfserving_image(gpu=True) == f"tensorflow/serving:{_env_pin('TF_SERVING_VERSION')}-gpu"


def test_the_image_follows_compose_interpolation(monkeypatch):
    # Compose lets the shell override .env; the image name is Compose's, so it does too.
    monkeypatch.setenv("TF_SERVING_VERSION", "9.9.9")
    assert tfserving_image() == "tensorflow/serving:9.9.9"
    files = [REPO_ROOT / "docker-compose.yml"]
    env = {"GRAFANA_ADMIN_PASSWORD": "x", **os.environ}
    assert tfserving_image(gpu=True) == load_compose_model(files, services=["tfserving"], env=env,
                                                           project_dir=REPO_ROOT)["services"]["tfserving"]["image"]


# ------------------------------------------------------------------ the real engine of this host

@pytest.fixture(scope="module")
def engine():
    found = probe_engine()
    if not found.answers:
        pytest.skip(f"no engine to ask: {found.reason}")
    return found


@pytest.fixture(scope="module")
def own_image(engine, tmp_path_factory):
    """A tiny image of this test's own (one text file, imported), removed afterwards: the shared engine's
    other images belong to others and may go away while this runs."""
    tar = tmp_path_factory.mktemp("image") / "probe.tar"
    text = tar.with_name("probe.txt")
    text.write_text("tfs-stack probe test image\n")
    with tarfile.open(tar, "w") as archive:
        archive.add(text, arcname="probe.txt")
    name = f"tfs-stack-test/empty:probe-{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "import", str(tar), name], check=True, capture_output=True, timeout=120)
    yield name
    subprocess.run(["docker", "image", "rm", name], check=True, capture_output=True, timeout=120)


@pytest.mark.docker
def test_the_real_engine_answers(engine):
    assert engine.answers and engine.reason == "a Docker engine answers"
    assert "runc" in engine.runtimes


@pytest.mark.docker
def test_the_real_engine_knows_which_images_it_has(own_image):
    assert image_present(own_image)
    assert not image_present(f"tfs-stack-test/never-built:{uuid.uuid4().hex[:8]}")
    listed = subprocess.run(["docker", "images", "--quiet", TFS], capture_output=True, text=True, timeout=60)
    assert image_present(TFS) == bool(listed.stdout.strip())  # False on this host: no registry ever answered


@pytest.mark.docker
def test_the_real_engine_without_the_image_starts_nothing(engine):
    image = f"tfs-stack-test/never-built:{uuid.uuid4().hex[:8]}"
    with pytest.raises(TFServingUnavailable, match=f"image {image} is not present locally and is never pulled"):
        run_tf_serving([], image=image)


@pytest.mark.docker
@pytest.mark.slow
def test_the_real_engine_runs_the_argv_and_a_failed_start_leaves_no_container(own_image):
    # The image has no tensorflow_model_server: the engine accepts every flag of the argv, then cannot start it.
    failed = f"`docker run` of {own_image} failed: docker: Error response from daemon: .*tensorflow_model_server"
    with pytest.raises(RuntimeError, match=failed + '": executable file not found'):
        run_tf_serving(["--model_name=m"], image=own_image, mounts=[Mount(REPO_ROOT / "serving", "/cfg")])
    left = subprocess.run(["docker", "ps", "--all", "--quiet", "--filter", f"ancestor={own_image}"],
                          capture_output=True, text=True, timeout=60)
    assert left.stdout.strip() == ""
