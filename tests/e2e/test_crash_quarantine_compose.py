"""A version that crashes the server costs compose one restart, not a crash loop, on the real engine.

Only the ``tfserving`` service runs, as ``docker-compose.yml`` + ``docker-compose.cpu.yml`` +
``docker-compose.local.yml`` define it (its command line, mounts, read-only root and /tmp tmpfs,
``restart: unless-stopped``), on the stand-in image, in a project of its own (no exporter: the models
are written here). ``flaky`` version 2 aborts the process in its warmup (``tf.raw_ops.Abort``); ``steady``
is a good model. The container crashes once; compose's restart policy starts it again; the crash
marker, kept in the stand-in's crash-marker volume across the restart (the container's /tmp is a
tmpfs, emptied at every start), quarantines version 2, so ``steady`` and ``flaky`` version 1 serve and
Docker's RestartCount stays 1.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from serving.checkout import REPO_ROOT
from serving.config.compose import compose_command, with_grafana_placeholder
from tests.support.compose_stack import FILES, PROJECT_PREFIX, docker, skip_reason
from tests.support.docker_cli import environ
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.docker]

PROJECT = f"{PROJECT_PREFIX}quarantine-{os.getpid()}"
CONFIG = """model_config_list {
  config { name: "steady" base_path: "/models/steady" model_platform: "tensorflow" }
  config { name: "flaky" base_path: "/models/flaky" model_platform: "tensorflow" }
}
"""


def _compose(root: Path, env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [*compose_command(), "-p", PROJECT, *[a for f in FILES for a in ("-f", str(root / f))], *args]
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"compose {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def _project(root: Path) -> None:
    """The compose files and .env, a model repository with the bad publish, and the served config."""
    from tests.support.crashing_model import export_aborting
    from tests.support.models import export_tiny

    root.mkdir(parents=True)
    for name in (*FILES, ".env"):
        shutil.copy(REPO_ROOT / name, root / name)
    export_tiny(root / "models" / "steady" / "1")
    export_tiny(root / "models" / "flaky" / "1")
    export_aborting(root / "models" / "flaky" / "2")
    config = root / "config"
    config.mkdir()
    (config / "models.cpu.config").write_text(CONFIG)
    shutil.copy(REPO_ROOT / "serving" / "monitoring.config", config / "monitoring.config")
    for path in [root, *root.rglob("*")]:   # readable by the container's user
        path.chmod(0o755 if path.is_dir() else 0o644)


def _inspect(container: str) -> dict:
    return json.loads(docker("inspect", container).stdout)[0]


def _ask(container: str, path: str, body: str = "") -> dict | None:
    """REST inside the container (tfserving publishes no port); None while nothing answers."""
    extra = ["-d", body] if body else []
    proc = docker("exec", container, "curl", "-sf", "--max-time", "5", *extra, f"http://127.0.0.1:8501{path}",
                  check=False, timeout=30)
    return json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout else None


def _available(container: str, name: str) -> bool:
    answer = _ask(container, f"/v1/models/{name}")
    return bool(answer) and any(v["state"] == "AVAILABLE" for v in answer["model_version_status"])


def test_a_version_whose_warmup_aborts_costs_compose_one_restart(tmp_path):
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path / "project"
    _project(root)
    uid = str(os.getuid() or 1000)   # make up never runs a container as root
    env = with_grafana_placeholder(environ(COMPOSE_PROJECT_NAME=PROJECT, HOST_UID=uid, HOST_GID=uid,
                                           TFS_CONFIG_HOST_DIR=str(root / "config"), TFS_CPUS="1",
                                           TFS_MEM_LIMIT="2147483648"))
    try:
        _compose(root, env, "up", "-d", "--no-deps", "tfserving")
        container = _compose(root, env, "ps", "-a", "-q", "tfserving").stdout.split()[0]

        def restarted_and_serving() -> bool:
            state = _inspect(container)
            assert state["RestartCount"] <= 1, (
                f"crash loop: RestartCount {state['RestartCount']} (the crash marker did not survive the restart)")
            return (state["RestartCount"] == 1 and state["State"]["Running"]
                    and _available(container, "steady") and _available(container, "flaky"))

        wait_until(restarted_and_serving, "tfserving restarted once and serving steady and flaky", timeout=300,
                   every=0.5)
        logs = docker("logs", container).stdout + docker("logs", container).stderr
        assert "this version aborts the process" in logs   # the first start died in version 2's warmup
        statuses = {v["version"]: v for v in _ask(container, "/v1/models/flaky")["model_version_status"]}
        assert statuses["1"]["state"] == "AVAILABLE"
        assert (statuses["2"]["state"], statuses["2"]["status"]["error_code"]) == ("END", "FAILED_PRECONDITION")
        assert "quarantined" in statuses["2"]["status"]["error_message"]
        answer = _ask(container, "/v1/models/steady:predict", '{"instances": [[1.0, 2.0, 3.0]]}')
        assert answer is not None and len(answer["predictions"]) == 1
        # The marker lives in the crash-marker volume, not in the container's /tmp; the operator's
        # commands of docs/operations.md read and clear it inside the container.
        quarantine = ("/opt/venv/bin/python -m serving.server.quarantine "
                      "--quarantine_dir /var/lib/tfs-stack/crash-markers/$(id -u)")
        listing = docker("exec", container, "sh", "-c", f"{quarantine} list", check=False)
        assert listing.stdout.startswith("flaky\t2\t/models/flaky/2\t"), listing.stdout + listing.stderr
        cleared = docker("exec", container, "sh", "-c", f"{quarantine} clear flaky 2", check=False)
        assert cleared.returncode == 0 and "cleared version 2 of model flaky" in cleared.stdout, cleared.stderr
        state = _inspect(container)
        assert (state["RestartCount"], state["State"]["Running"]) == (1, True)
        print(f"\nRestartCount {state['RestartCount']}; flaky version 2 {statuses['2']['status']['error_message']}")
    finally:
        _compose(root, env, "down", "-v", "--remove-orphans", "--timeout", "10", check=False)
