"""What the README and docs/ name exists: paths, links, `python -m` modules, `make` targets; shell blocks parse.

A page may name files that a run creates (``models/...``, ``out/...``, ``.cache/...``,
``gateway/secrets/...``) and things that are not paths of this checkout (image names such as
``tensorflow/serving``, paths inside a container such as ``/models``); only what starts with a
top-level entry of the checkout, other than those generated folders, is held to exist.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from serving.checkout import REPO_ROOT


PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
# Written by a run (git-ignored, or created by make up / the exporter / make certs), not committed.
GENERATED = ("models/", "out/", ".cache/", "gateway/secrets/", ".venv/")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
MODULE = re.compile(r"python3? -m ([A-Za-z_][\w.]*)")
SCRIPT = re.compile(r"python3? ((?:[\w.-]+/)+[\w.-]+\.py)\b")
MAKE = re.compile(r"(?:^|[\s`(;&|])make ([a-z][\w-]*)")


def _text(page: Path) -> str:
    return page.read_text()


def _blocks(page: Path, languages: tuple[str, ...] = ("bash", "sh", "")) -> list[str]:
    return [body for lang, body in FENCE.findall(_text(page)) if lang in languages]


def _prose(page: Path) -> str:
    return FENCE.sub("", _text(page))


def _top_level() -> set[str]:
    return {p.name for p in REPO_ROOT.iterdir()} - {".git"}


def _path_candidates(page: Path) -> set[str]:
    """Inline code that names a file or folder of this checkout, as the page spells it."""
    found = set()
    tops = _top_level()
    for token in INLINE.findall(_prose(page)) + [w for b in _blocks(page) for w in b.split()]:
        for raw in token.split():
            word = raw.strip("\"'(),;:")
            if "<" in word or "://" in word or word.startswith(GENERATED) or "=" in word:
                continue
            first = word.split("/")[0]
            if first in tops and ("/" in word or "." in word or word in {"Makefile"}):
                found.add(word.split("#")[0].split(":")[0])
    return found


def _exists(relative: str) -> bool:
    if any(c in relative for c in "*?["):
        return any(REPO_ROOT.glob(relative))
    return (REPO_ROOT / relative).exists()


def _makefile_targets() -> set[str]:
    targets = set()
    for line in (REPO_ROOT / "Makefile").read_text().splitlines():
        head = re.match(r"^([\w .-]+):(?!=)", line)
        if head and not line.startswith("\t"):
            targets.update(head.group(1).split())
    return targets


def _is_runnable_module(name: str) -> bool:
    path = REPO_ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()


def _readme_modules() -> list[str]:
    """The project's modules that the README's command blocks run."""
    return sorted({m for block in _blocks(REPO_ROOT / "README.md") for m in MODULE.findall(block)
                   if m.split(".")[0] in _top_level()})


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_path_a_page_names_exists(page):
    missing = sorted(p for p in _path_candidates(page) if not _exists(p))
    assert missing == [], f"{page.name} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    links = [t.split("#")[0] for t in LINK.findall(_text(page)) if "://" not in t and not t.startswith("#")]
    missing = sorted(t for t in links if t and not (page.parent / t).exists())
    assert missing == [], f"{page.name} links to files that do not exist: {missing}"


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown page."""
    headings = re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_anchor_a_link_names_is_a_heading(page):
    broken = []
    for target in LINK.findall(_text(page)):
        path, _, anchor = target.partition("#")
        linked = page.parent / path if path else page
        if anchor and "://" not in target and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(target)
    assert broken == [], f"{page.name} links to headings that do not exist: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_python_module_and_script_a_page_runs_exists(page):
    text = _text(page)
    project = _top_level()
    missing = sorted({m for m in MODULE.findall(text) if m.split(".")[0] in project and not _is_runnable_module(m)}
                     | {s for s in SCRIPT.findall(text) if not (REPO_ROOT / s).is_file()})
    assert missing == [], f"{page.name} runs modules or scripts that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_make_target_a_page_names_is_in_the_makefile(page):
    text = "\n".join(INLINE.findall(_prose(page)) + _blocks(page))
    unknown = sorted(set(MAKE.findall(text)) - _makefile_targets())
    assert unknown == [], f"{page.name} names make targets the Makefile lacks: {unknown}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_shell_block_parses(page):
    for block in _blocks(page, ("bash", "sh")):
        result = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True)
        assert result.returncode == 0, f"{page.name}: bash -n refuses\n{block}\n{result.stderr}"


def test_the_checks_see_what_the_pages_name():
    readme = REPO_ROOT / "README.md"
    assert {"serving/batching.cpu.config", "tests/contract/"} <= _path_candidates(readme)
    assert "models/my_model/1" not in _path_candidates(readme)  # made by the run, not committed
    assert {"serving.config", "serving.rollout", "loadtest"} <= set(_readme_modules())
    assert {"up", "test"} <= set(MAKE.findall("\n".join(_blocks(readme))))
    assert {"clients-tls-credentials-and-logs", "what-make-up-does"} <= _anchors(REPO_ROOT / "docs" / "operations.md")
    assert not _exists("docs/no-such-page.md") and not _is_runnable_module("serving.no_such_module")


def test_the_readme_stays_short():
    assert len((REPO_ROOT / "README.md").read_bytes()) <= 15 * 1024


@pytest.mark.slow
@pytest.mark.parametrize("module", _readme_modules())
def test_every_module_the_readme_runs_answers_help(module):
    result = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, f"python -m {module} --help: exit {result.returncode}\n{result.stderr[-2000:]}"
