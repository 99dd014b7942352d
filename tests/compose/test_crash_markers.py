"""The stand-in keeps its crash markers in a volume compose gives tfserving, so a restart reads them.

The container's /tmp is a tmpfs emptied at every start, where the embedded server's default
``--quarantine_dir`` lives: without a directory that outlives the restart, a version that aborts
the server at warmup crashes it again at every restart (compose's ``restart: unless-stopped``
crash-loops). The compose files mount the ``tfserving-crash-markers`` volume at the stand-in's
crash-marker directory; the stand-in's wrapper (``deploy/images/tfserving/tensorflow_model_server``)
uses it when it is writable. TF Serving's own command line gets no embedded-only flag. The engine
test (tests/e2e/test_crash_quarantine_compose.py) shows the restart count stays 1.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from serving.checkout import REPO_ROOT


WRAPPER = REPO_ROOT / "deploy" / "images" / "tfserving" / "tensorflow_model_server"
DOCKERFILE = REPO_ROOT / "deploy" / "images" / "tfserving" / "Dockerfile"
MARKERS = "/var/lib/tfs-stack/crash-markers"
VOLUME = "tfserving-crash-markers"


@pytest.fixture(params=["gpu", "cpu"])
def model(request, gpu_model, cpu_model) -> dict:
    return {"gpu": gpu_model, "cpu": cpu_model}[request.param]


def test_tfserving_mounts_a_writable_named_volume_at_the_crash_marker_directory(model):
    mounts = {v["target"]: v for v in model["services"]["tfserving"]["volumes"]}
    assert mounts[MARKERS]["type"] == "volume" and mounts[MARKERS]["source"] == VOLUME
    assert not mounts[MARKERS].get("read_only")
    assert VOLUME in model["volumes"]   # a named volume: it outlives the container (and `make down`)


def test_tf_servings_command_line_names_no_quarantine_dir(model):
    service = model["services"]["tfserving"]
    assert not [a for a in [*service["entrypoint"], *service["command"]] if "quarantine" in a]


def test_the_wrapper_and_the_image_use_the_mounted_path():
    assert re.search(rf"^markers={re.escape(MARKERS)}$", WRAPPER.read_text(), re.M)
    # Mode 1777 in the image: Docker gives a new volume the image directory's mode, so any HOST_UID writes.
    assert f"mkdir -m 1777 {MARKERS}" in DOCKERFILE.read_text()


def _wrapper_argv(tmp_path: Path, markers: Path, *args: str, prefix: tuple[str, ...] = ()) -> list[str]:
    """Run the real wrapper with its python replaced by a script printing its argv, one per line."""
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    python.chmod(0o755)
    wrapper = tmp_path / "tensorflow_model_server"
    wrapper.write_text(WRAPPER.read_text().replace("/opt/venv/bin/python", str(python))
                       .replace(f"markers={MARKERS}", f"markers={markers}"))
    wrapper.chmod(0o755)
    proc = subprocess.run([*prefix, str(wrapper), *args], capture_output=True, text=True, timeout=30, check=True)
    return proc.stdout.splitlines()


def test_the_wrapper_says_the_mounted_directory_first_per_uid(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    argv = _wrapper_argv(tmp_path, markers, "--port=8500")
    assert argv == ["-m", "serving.server", "--bind_address=0.0.0.0", f"--quarantine_dir={markers}/{os.getuid()}",
                    "--port=8500"]


def test_a_quarantine_dir_on_the_command_line_comes_last_so_it_wins(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    argv = _wrapper_argv(tmp_path, markers, "--quarantine_dir=/elsewhere")
    assert argv.index(f"--quarantine_dir={markers}/{os.getuid()}") < argv.index("--quarantine_dir=/elsewhere")
    from serving.server.flags import parse_flags
    assert parse_flags(argv[2:]).flags.quarantine_dir == "/elsewhere"


def test_without_the_directory_the_servers_default_stands(tmp_path):
    argv = _wrapper_argv(tmp_path, tmp_path / "absent", "--port=8500")
    assert argv == ["-m", "serving.server", "--bind_address=0.0.0.0", "--port=8500"]


def test_on_a_read_only_root_without_the_volume_the_servers_default_stands(tmp_path):
    """The image's directory on compose's read-only root, where no volume is mounted (a real read-only bind
    in a private mount namespace)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a read-only bind mount")
    markers = tmp_path / "markers"
    markers.mkdir(mode=0o1777)
    script = f'mount --bind -o ro "{markers}" "{markers}" && exec "$0" "$@"'
    argv = _wrapper_argv(tmp_path, markers, "--port=8500", prefix=("unshare", "--mount", "sh", "-c", script))
    assert argv == ["-m", "serving.server", "--bind_address=0.0.0.0", "--port=8500"]
