"""The local images: what each is made of, hashed; a second build of an unchanged image does nothing."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from deploy.images.build import IMAGES, Image, build_images, content_hash
from serving.checkout import REPO_ROOT
from serving.stack.docker import image_present, probe_engine


def by_name(name: str) -> Image:
    return next(i for i in IMAGES if i.name == name)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The files the images are made of, in a scratch copy."""
    root = tmp_path / "checkout"
    for folder in ("deploy/images", "serving"):
        shutil.copytree(REPO_ROOT / folder, root / folder)
    for name in ("pyproject.toml", "README.md", ".env", ".dockerignore"):
        shutil.copy(REPO_ROOT / name, root / name)
    return root


def test_every_image_names_a_local_base_and_none_an_upstream_name():
    names = {i.name for i in IMAGES}
    for image in IMAGES:
        assert image.name.startswith("tfs-stack-local/"), image.name
        assert image.suite or image.base in names, image


def test_the_hash_is_stable_and_changes_with_each_input(checkout):
    tfserving = next(i for i in IMAGES if i.name.startswith("tfs-stack-local/tfserving:"))
    before = content_hash(tfserving, "base", checkout)
    assert content_hash(tfserving, "base", checkout) == before
    assert content_hash(tfserving, "another base", checkout) != before  # a rebuilt base rebuilds it
    (checkout / "serving" / "status.py").write_text((checkout / "serving" / "status.py").read_text() + "\n# x\n")
    edited = content_hash(tfserving, "base", checkout)
    assert edited != before
    (checkout / "serving" / "__pycache__").mkdir(exist_ok=True)
    (checkout / "serving" / "__pycache__" / "x.pyc").write_bytes(b"compiled")
    assert content_hash(tfserving, "base", checkout) == edited  # byte code is not an input
    nginx = by_name("tfs-stack-local/nginx:1.30-forky")
    assert content_hash(nginx, "base", checkout) == content_hash(nginx, "base", checkout)
    (checkout / "serving" / "status.py").write_text("changed")
    assert content_hash(nginx, "base", checkout) == content_hash(nginx, "base", checkout)


def test_a_config_change_never_rebuilds_the_stand_in(checkout):
    """serving/*.config are mounted at run time, not run from the image: .dockerignore leaves them out of
    the build context and so out of the hash. Before: a `serving.config add` (which rewrote
    serving/models.config) made the next make up IMAGES=local rebuild the stand-in and restart tfserving."""
    tfserving = next(i for i in IMAGES if i.name.startswith("tfs-stack-local/tfserving:"))
    before = content_hash(tfserving, "base", checkout)
    for name in ("models.config", "models.cpu.config", "batching.config", "monitoring.config"):
        (checkout / "serving" / name).write_text((checkout / "serving" / name).read_text() + "\n# edited\n")
    (checkout / "serving" / "new.config").write_text("model_config_list {}\n")
    assert content_hash(tfserving, "base", checkout) == before
    (checkout / "serving" / "server" / "extra.py").write_text("# code the server could run\n")
    assert content_hash(tfserving, "base", checkout) != before  # code still counts


@pytest.mark.docker
def test_a_second_build_of_unchanged_images_builds_nothing():
    engine = probe_engine()
    if not engine.answers:
        pytest.skip(engine.reason)
    names = [i.name for i in IMAGES]
    if not all(image_present(n) for n in names):
        pytest.skip("the local images are not built (make images)")
    build_images(only=names, log=lambda _: None)  # whatever changed since make test built them
    assert build_images(only=names, log=lambda _: None) == []
