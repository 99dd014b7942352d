"""benchmarks.revisions: the base server really runs the revision's code, and the targets are the 3 % floor."""
from __future__ import annotations

import subprocess
import sys

from benchmarks import revisions
from benchmarks.targets import REVISION_THROUGHPUT
from serving.checkout import REPO_ROOT


def test_checkout_writes_the_revision_files(tmp_path):
    commit = revisions.checkout("HEAD", tmp_path)
    assert len(commit) == 40
    assert (tmp_path / "serving" / "server" / "__main__.py").is_file()


def test_the_revision_server_imports_serving_from_its_tree(tmp_path):
    """The launcher runs from this checkout (its cwd); the revision's tree must still come first."""
    (tmp_path / "serving").mkdir()
    (tmp_path / "serving" / "__init__.py").write_text("")
    (tmp_path / "serving" / "server").mkdir()
    (tmp_path / "serving" / "server" / "__init__.py").write_text("")
    (tmp_path / "serving" / "server" / "__main__.py").write_text("import serving, sys; print(serving.__file__)")
    command = revisions.RevisionServer(tmp_path).command
    out = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(tmp_path / "serving" / "__init__.py")
    assert command[0] == sys.executable


def test_targets_are_head_over_base_at_the_floor():
    declared = revisions.scenario(revisions.RevisionServer(REPO_ROOT), revisions.RevisionServer(REPO_ROOT),
                                  REPO_ROOT / "models")
    limited = [t for t in declared.targets if t.limit is not None]
    assert [(t.of[0], t.to[0], t.of[1].protocol, t.limit) for t in limited] == [
        ("head", "base", "grpc", REVISION_THROUGHPUT), ("head", "base", "rest", REVISION_THROUGHPUT)]
    assert REVISION_THROUGHPUT == 0.97
