"""An export into a read-only or full disk ends in one error naming the path and errno, exit 1, no traceback.

The disks are real tmpfs mounts (read-only, and 12 KiB) in a private mount
namespace (``unshare -m``), so nothing leaks to the host; skipped where this
process may not mount.
"""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from serving.checkout import REPO_ROOT
from tests.support.models import export_tiny


def _can_mount(tmp_path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=12k tmpfs {tmp_path}"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.slow   # two exports of a real SavedModel
@pytest.mark.parametrize("options,errno_name", [("ro,size=1m", "EROFS"), ("size=12k", "ENOSPC")])
def test_an_export_into_a_read_only_or_full_disk_names_the_path_and_errno(tmp_path, options, errno_name):
    (tmp_path / "repo").mkdir()
    if not _can_mount(tmp_path / "repo"):
        pytest.skip("cannot mount a tmpfs here (needs CAP_SYS_ADMIN and unshare)")
    source = export_tiny(tmp_path / "source")
    export = (f"{sys.executable} -m exporter export --from {source} --name m --signature serving_default "
              f"--model-repo {tmp_path / 'repo'} --quiet")
    result = subprocess.run(
        ["unshare", "-m", "sh", "-c",
         f"mount --make-rprivate / && mount -t tmpfs -o {options} tmpfs {tmp_path / 'repo'} && exec {export}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr[-2000:]
    assert f"error: cannot write the export under {tmp_path / 'repo'}/m" in result.stderr
    assert errno_name in result.stderr and "nothing was published" in result.stderr
    assert "Traceback" not in result.stderr
