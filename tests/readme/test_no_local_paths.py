"""No tracked file holds a path of one machine or a reference outside the repository.

A clone on another machine has no ``/work/...`` or ``/root/...``, and no
``shared/reference/...`` beside it: such a path in a doc, a docstring or a
comment sends its reader nowhere. Pages (Markdown) also name no absolute
``/tmp/...`` path (a reader's own directory, or one relative to the checkout,
says the same). A relative path (``../x``) stays inside the checkout.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from serving.checkout import REPO_ROOT


# Paths of the machine the project was built on, and the notes kept beside the checkout there.
MACHINE_LOCAL = re.compile(r"(?<![\w.~-])/(?:work|root|home/\w+)/|shared/reference/")
TMP = re.compile(r"(?<![\w.~-])/tmp/")
RELATIVE = re.compile(r"(?<![\w.~/-])((?:\.\./)+)([\w.-]*)")
# Files where a /tmp path is not the reader's machine, with the reason.
TMP_ALLOWED = {
    "gateway/README.md": "the nginx configuration's path inside the gateway container",
}
# This check names what it refuses.
SELF = "tests/readme/test_no_local_paths.py"


def tracked_files(root: Path = REPO_ROOT) -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    return [name for name in listed.decode().split("\0") if name]


def _text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None
    if b"\0" in data[:8192]:
        return None
    return data.decode(errors="replace")


def findings(names: list[str], root: Path = REPO_ROOT) -> list[str]:
    """``file:line: text`` for every machine-local path or reference leaving the checkout."""
    found = []
    for name in names:
        if name == SELF:
            continue
        text = _text(root / name)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            bad = bool(MACHINE_LOCAL.search(line))
            bad |= name.endswith(".md") and name not in TMP_ALLOWED and bool(TMP.search(line))
            for ups, rest in RELATIVE.findall(line):
                target = ((root / name).parent / ups / rest).resolve()
                bad |= not target.is_relative_to(root.resolve())
            if bad:
                found.append(f"{name}:{number}: {line.strip()}")
    return found


def test_no_tracked_file_holds_a_machine_local_path_or_a_reference_outside_the_checkout():
    assert findings(tracked_files()) == []


def test_the_check_sees_each_kind(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(
        "run `git clone /work/main /tmp/fc`\nsee ../../shared/notes.md\nsee [x](../README.md)\nkeep /models/digits\n")
    (tmp_path / "tool.py").write_text('"""Facts: shared/reference/tf-serving.md."""\nPATH = "/tmp/x"  # code may\n')
    (tmp_path / "README.md").write_text("")
    assert [f.split(":")[:2] for f in findings(["docs/page.md", "tool.py"], tmp_path)] == [
        ["docs/page.md", "1"], ["docs/page.md", "2"], ["tool.py", "1"]]
