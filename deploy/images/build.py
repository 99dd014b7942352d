"""The local stand-in images, built here from Debian's packages, and cached by content.

No registry answers on the machines that test this repository, so every image
the compose stack runs is built locally (``docker-compose.local.yml`` names
them). Two Debian bases come from ``debootstrap`` + ``docker import``; every
other image is a ``docker build`` on one of them. An image is rebuilt only
when the hash of what it is made of changes: its Dockerfile, the files it
copies, its build arguments and its base's hash, which the image carries as
the label :data:`HASH_LABEL` (so a new clone on the same engine builds nothing).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from serving.checkout import REPO_ROOT
from serving.config.compose import (
    COMPOSE_FILES,
    LOCAL_OVERRIDE,
    compose_command,
    read_dotenv,
    with_grafana_placeholder,
)
from serving.stack.docker import image_label

__all__ = ["CACHE_DIR", "Image", "IMAGES", "EXPORTER_IMAGE", "NGINX_IMAGE", "content_hash", "build_images",
           "debian_mirror"]

CACHE_DIR = REPO_ROOT / ".cache" / "images"
HERE = Path(__file__).resolve().parent
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# Packages every base has: TLS roots and curl (busybox's wget crashes on name lookups here).
BASE_PACKAGES = ("ca-certificates", "curl")
# Suites this machine's debootstrap may not know by name (Debian 12's knows no forky): the script
# that makes them. Testing and unstable share sid's.
DEBOOTSTRAP_SCRIPTS = {"forky": "sid"}
# The gateway's stand-in: nginx from Debian testing (forky), the one Debian nginx at or above 1.27.3,
# the first with `server ... resolve` in an upstream block, which the pinned image (1.28) has too.
NGINX_IMAGE = "tfs-stack-local/nginx:1.30-forky"
# The label each image carries: the content hash it was built from.
HASH_LABEL = "org.tfs-stack.content-hash"


@dataclass(frozen=True)
class Image:
    """One local image: a Debian base (``suite``) or a Dockerfile build on ``base``.

    ``inputs`` are repository paths (files or folders) whose content the image
    is made of; ``context`` is the build context: ``repo`` (the checkout) or
    ``ca`` (a folder holding this machine's CA bundle).
    """

    name: str
    suite: str = ""
    dockerfile: str = ""
    base: str = ""
    context: str = "repo"
    inputs: tuple[str, ...] = ()
    args: Mapping[str, str] = field(default_factory=dict)


def _dotenv(key: str, root: Path = REPO_ROOT) -> str:
    """A pin of ``.env`` (compose's own file; the one place versions live)."""
    pins = read_dotenv(root)
    if key not in pins:
        raise KeyError(f".env has no {key}")
    return pins[key]


def _images(root: Path = REPO_ROOT) -> tuple[Image, ...]:
    serving_api = f"tensorflow-serving-api=={_dotenv('TF_SERVING_VERSION', root)}"
    tensorflow = f"tfs-stack-local/tensorflow:{_dotenv('TF_VERSION', root)}"
    return (
        Image("tfs-stack-local/debian:bookworm", suite="bookworm"),
        Image("tfs-stack-local/debian:forky", suite="forky"),
        Image(tensorflow, dockerfile="deploy/images/tensorflow/Dockerfile", base="tfs-stack-local/debian:bookworm",
              context="ca", inputs=("deploy/images/tensorflow",),
              args={"TENSORFLOW": f"tensorflow=={_dotenv('TF_VERSION', root)}"}),
        Image(f"tfs-stack-local/tfserving:{_dotenv('TF_SERVING_VERSION', root)}",
              dockerfile="deploy/images/tfserving/Dockerfile", base=tensorflow,
              inputs=("deploy/images/tfserving", "pyproject.toml", "constraints.txt", "README.md", "serving"),
              args={"TF_SERVING_API": serving_api}),
        Image(NGINX_IMAGE, dockerfile="deploy/images/nginx/Dockerfile",
              base="tfs-stack-local/debian:forky", context="folder", inputs=("deploy/images/nginx",)),
        Image("tfs-stack-local/prometheus:2.42-bookworm", dockerfile="deploy/images/prometheus/Dockerfile",
              base="tfs-stack-local/debian:bookworm", context="folder", inputs=("deploy/images/prometheus",)),
    )


IMAGES = _images()
# The exporter is compose's own build of exporter/Dockerfile (docker-compose.local.yml sets BASE_IMAGE).
EXPORTER_IMAGE = "exporter"


def dockerignore_patterns(root: Path) -> list[re.Pattern]:
    """``root/.dockerignore``'s patterns as regular expressions over a path relative to the context
    (Docker's syntax as used there: ``*`` within one path segment, ``**`` across segments, a trailing
    ``/`` or a folder name covering what is below it)."""
    path = root / ".dockerignore"
    lines = path.read_text().splitlines() if path.is_file() else []
    patterns = []
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        parts = re.split(r"(\*\*/?|\*|\?)", line.strip("/"))
        body = "".join({"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(p, re.escape(p)) for p in parts)
        patterns.append(re.compile(f"{body}(?:/.*)?"))
    return patterns


def _files(root: Path, inputs: Sequence[str]) -> list[Path]:
    """The files of ``inputs`` that a build sends: .dockerignore's exclusions apply (so the stand-in's
    hash covers the code it runs, not ``serving/*.config``, which compose mounts at run time)."""
    ignored = dockerignore_patterns(root)
    found: list[Path] = []
    for item in inputs:
        path = root / item
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        found += [p for p in candidates if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
                  and not any(pattern.fullmatch(p.relative_to(root).as_posix()) for pattern in ignored)]
    return found


def content_hash(image: Image, base_hash: str = "", root: Path = REPO_ROOT) -> str:
    """What ``image`` is made of, as one SHA-256: recipe, inputs, arguments and its base's hash."""
    digest = hashlib.sha256()
    recipe = {"name": image.name, "suite": image.suite, "packages": BASE_PACKAGES if image.suite else (),
              "dockerfile": image.dockerfile, "args": dict(image.args), "base": base_hash,
              "context": image.context}
    digest.update(json.dumps(recipe, sort_keys=True).encode())
    for path in _files(root, (image.dockerfile, *image.inputs) if image.dockerfile else image.inputs):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    if image.context == "ca" and CA_BUNDLE.is_file():
        digest.update(CA_BUNDLE.read_bytes())
    return digest.hexdigest()


def debian_mirror(sources: Path = Path("/etc/apt/sources.list.d/debian.sources")) -> str:
    """The Debian mirror this machine's apt uses (deb822 ``URIs:``), else deb.debian.org."""
    if sources.is_file():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:") and line.split()[1].rstrip("/").endswith("/debian"):
                return line.split()[1]
    return DEFAULT_MIRROR


def _run(cmd: Sequence[str], log: Path, **kwargs: object) -> None:
    with open(log, "ab") as out:
        out.write(f"\n+ {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.run(list(cmd), stdout=out, stderr=subprocess.STDOUT, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        raise RuntimeError(f"`{' '.join(cmd[:4])} ...` failed (exit {proc.returncode}); {log}:\n    "
                           + "\n    ".join(tail))


def _debootstrap(image: Image, digest: str, log: Path, docker: str) -> None:
    if shutil.which("debootstrap") is None and shutil.which("debootstrap", path="/usr/sbin:/sbin") is None:
        _run(["apt-get", "install", "-y", "-q", "debootstrap"], log,
             env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    with tempfile.TemporaryDirectory(prefix=f"rootfs-{image.suite}-", dir=CACHE_DIR) as rootfs:
        script = DEBOOTSTRAP_SCRIPTS.get(image.suite)
        _run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", image.suite, rootfs,
              debian_mirror(), *([f"/usr/share/debootstrap/scripts/{script}"] if script else [])], log,
             env={**os.environ, "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin"})
        tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        try:
            _run([docker, "import", "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                  "--change", 'CMD ["/bin/bash"]', "--change", f"LABEL {HASH_LABEL}={digest}", "-", image.name],
                 log, stdin=tar.stdout)
        finally:
            tar.wait()


def _docker_build(image: Image, digest: str, root: Path, log: Path, docker: str) -> None:
    dockerfile = root / image.dockerfile
    args = [a for k, v in {**image.args}.items() for a in ("--build-arg", f"{k}={v}")]
    base_arg = "TENSORFLOW_IMAGE" if image.base.startswith("tfs-stack-local/tensorflow:") else "DEBIAN_IMAGE"
    cmd = [docker, "build", "-q", "-f", str(dockerfile), "-t", image.name, "--label", f"{HASH_LABEL}={digest}",
           "--build-arg", f"{base_arg}={image.base}", *args]
    if image.context == "repo":
        _run([*cmd, str(root)], log)
    elif image.context == "folder":
        _run([*cmd, str(dockerfile.parent)], log)
    else:
        with tempfile.TemporaryDirectory(prefix="ca-context-", dir=CACHE_DIR) as context:
            shutil.copy(CA_BUNDLE, Path(context) / "ca-certificates.crt")
            _run([*cmd, context], log)


def _compose_build_exporter(root: Path, log: Path) -> None:
    files = [a for f in (*COMPOSE_FILES["cpu"], LOCAL_OVERRIDE) for a in ("-f", str(root / f))]
    env = with_grafana_placeholder(os.environ)
    _run([*compose_command(), *files, "build", "exporter"], log, cwd=root, env=env)


def build_images(*, only: Sequence[str] = (), force: bool = False, root: Path = REPO_ROOT,
                 docker: str = "docker", log: Callable[[str], None] = print) -> list[str]:
    """Build every local image whose content changed (or ``only`` those names and their bases).

    Returns the names built. The exporter (compose's own build of
    ``exporter/Dockerfile`` on the local TensorFlow base) is built after the
    images, through Compose, where Docker's layer cache makes an unchanged
    one take seconds.
    """
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    logfile = CACHE_DIR / "build.log"
    images = _images(root)
    wanted = set(only) or {i.name for i in images} | {EXPORTER_IMAGE}
    by_name = {i.name: i for i in images}
    for name in list(wanted):
        base = name
        while base in by_name and by_name[base].base:
            base = by_name[base].base
            wanted.add(base)
    hashes: dict[str, str] = {}
    built: list[str] = []
    for image in images:
        hashes[image.name] = content_hash(image, hashes.get(image.base, ""), root)
        if image.name not in wanted:
            continue
        if not force and image_label(image.name, HASH_LABEL, docker) == hashes[image.name]:
            log(f"images: {image.name} up to date")
            continue
        started = time.monotonic()
        log(f"images: building {image.name} (log: {logfile})")
        if image.suite:
            _debootstrap(image, hashes[image.name], logfile, docker)
        else:
            _docker_build(image, hashes[image.name], root, logfile, docker)
        built.append(image.name)
        log(f"images: built {image.name} in {time.monotonic() - started:.0f} s")
    if EXPORTER_IMAGE in wanted:
        started = time.monotonic()
        log(f"images: compose build exporter (exporter/Dockerfile on the local TensorFlow base; log: {logfile})")
        _compose_build_exporter(root, logfile)
        log(f"images: exporter ready in {time.monotonic() - started:.0f} s")
        built.append(EXPORTER_IMAGE)
    return built
