"""The model repository: its layout and the zoo's published names, defined once.

A model repository (``models/`` on the host, ``/models`` in the containers)
holds one directory per published name, and in it one directory per version
whose name is the version number, as TF Serving's file-system source expects::

    models/<published name>/<version>/saved_model.pb
                                      manifest.json
                                      assets.extra/tf_serving_warmup_requests

- **Published names:** a zoo model is served under its own name in fp32 and
  under ``<model>_xla`` / ``<model>_trt_fp16`` in the other variants
  (:data:`VARIANT_SUFFIXES`, :func:`published_name`).
- **The zoo table:** :data:`ZOO` lists every zoo model in every variant that
  is published and served; TensorRT variants are GPU-only.
- **Versions:** numeric child directories are versions (:func:`model_versions`,
  :func:`latest_version_dir`); anything else is ignored. A name is a version
  number as TF Serving parses it (:func:`parse_version`: ``absl::SimpleAtoi``
  into an int64), so a name beyond int64 is no version at all. A new version is
  written into a non-numeric staging directory and renamed to its number as
  the last step (:class:`Staging`), so no reader ever sees half a version.
- **Warmup:** TF Serving replays ``assets.extra/tf_serving_warmup_requests``
  of a version at load time (:func:`warmup_path`).

The exporter, ``serving.config``, the rollout, the server's warmup and the
load tests import these names; this module imports nothing of the project.
"""
from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Optional, Union

__all__ = [
    "VARIANT_SUFFIXES",
    "GPU_ONLY_VARIANTS",
    "XLA_SERVING_FLAG",
    "published_name",
    "PublishedModel",
    "ZOO",
    "SMALL_ZOO",
    "WARMUP_DIR",
    "WARMUP_REQUESTS_FILE",
    "warmup_path",
    "INT64_MAX",
    "parse_version",
    "model_versions",
    "latest_version_dir",
    "next_version",
    "STAGING_PREFIX",
    "Staging",
    "VersionExists",
    "remove_stale_staging",
]

log = logging.getLogger(__name__)

PathLike = Union[str, Path]

# Variant → suffix of its published name.
VARIANT_SUFFIXES: dict[str, str] = {"fp32": "", "xla": "_xla", "trt-fp16": "_trt_fp16"}
# TensorRT engines need TF Serving's GPU image and the GPU type that built them.
GPU_ONLY_VARIANTS = frozenset({"trt-fp16"})
# The tensorflow_model_server flag an xla variant is served with: TF Serving 2.17.1 disables XLA JIT
# without it, on CPU and GPU alike (its main.cc has no --xla_gpu_compilation_enabled; 2.18 added one).
XLA_SERVING_FLAG = "--xla_cpu_compilation_enabled=true"


def published_name(model: str, variant: str = "fp32") -> str:
    """The name a variant is served under: ``digits``, ``digits_xla``, ``resnet50_trt_fp16``.

    ValueError for a variant that is not in :data:`VARIANT_SUFFIXES`.
    """
    try:
        return model + VARIANT_SUFFIXES[variant]
    except KeyError:
        raise ValueError(f"unknown variant {variant!r}; choose one of: {', '.join(VARIANT_SUFFIXES)}") from None


@dataclass(frozen=True)
class PublishedModel:
    """One served model: a zoo model in one variant, under its published name."""

    model: str
    variant: str = "fp32"

    @property
    def name(self) -> str:
        return published_name(self.model, self.variant)

    @property
    def gpu_only(self) -> bool:
        """TensorRT variants need TF Serving's GPU image and the GPU they were built on."""
        return self.variant in GPU_ONLY_VARIANTS


# Every zoo model in every variant that is published and served (the compose stack's models.config).
ZOO: tuple[PublishedModel, ...] = (
    PublishedModel("digits"),
    PublishedModel("digits", "xla"),
    PublishedModel("resnet50"),
    PublishedModel("resnet50", "xla"),
    PublishedModel("resnet50", "trt-fp16"),
    PublishedModel("text"),
    PublishedModel("ranker"),
)

# The zoo models `make up` exports into an empty repository: the small ones (seconds to train on a
# CPU). resnet50 and the variants are opt-in (`make up MODELS=all`).
SMALL_ZOO: tuple[str, ...] = ("digits", "text", "ranker")

# TensorFlow's kSavedModelAssetsExtraDirectory and TF Serving's warmup file name.
WARMUP_DIR = "assets.extra"
WARMUP_REQUESTS_FILE = "tf_serving_warmup_requests"


def warmup_path(version_dir: PathLike) -> Path:
    """Where TF Serving looks for the warmup requests of a version directory."""
    return Path(version_dir) / WARMUP_DIR / WARMUP_REQUESTS_FILE


INT64_MAX = 2**63 - 1
# absl::SimpleAtoi: ASCII blanks around an optional sign and decimal digits. Leading zeros are
# matched apart, so no more than 19 significant digits ever reach int().
_VERSION_NAME = re.compile(r"\s*([+-]?)0*([0-9]{1,19})\s*", re.ASCII)


def parse_version(name: str) -> Optional[int]:
    """The version number a directory name stands for, or None when it is not one.

    TF Serving's file-system source parses each child of a base path with
    ``absl::SimpleAtoi`` into an int64 and skips what does not parse
    (``file_system_storage_path_source.cc``): blanks around it and a sign are
    allowed, and a number outside int64 (``99999999999999999999``) is no version.
    """
    match = _VERSION_NAME.fullmatch(name)
    if match is None:
        return None
    sign, digits = match.groups()
    number = -int(digits) if sign == "-" else int(digits)
    return number if -INT64_MAX - 1 <= number <= INT64_MAX else None


def model_versions(model_dir: PathLike) -> list[int]:
    """The version directories under ``model_dir`` (plain decimal names within int64), ascending.

    [] when ``model_dir`` is missing. Stricter than the server's source, which also
    takes blanks and signs (:func:`parse_version`): a repository written here names
    versions by their plain number.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return []
    found = (parse_version(p.name) for p in model_dir.iterdir()
             if p.is_dir() and p.name.isascii() and p.name.isdigit())
    return sorted(v for v in found if v is not None)


def latest_version_dir(model_dir: PathLike) -> Path:
    """The highest numeric version directory under ``model_dir``; FileNotFoundError if none."""
    versions = model_versions(model_dir)
    if not versions:
        raise FileNotFoundError(f"no numeric version directory under {model_dir}")
    return Path(model_dir) / str(versions[-1])


def next_version(model_dir: PathLike) -> int:
    """One more than the highest published version (1 for a new model)."""
    versions = model_versions(model_dir)
    return versions[-1] + 1 if versions else 1


STAGING_PREFIX = ".export-"
# Staging dirs of another host (e.g. an exporter container sharing the volume)
# are only removed once they are this old, because their pid cannot be checked.
FOREIGN_STALE_SECONDS = 24 * 3600


class VersionExists(FileExistsError):
    """The requested version directory is already published."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_stale(path: Path, host: str) -> bool:
    parts = path.name[len(STAGING_PREFIX):].rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    owner_host, pid = parts[0], int(parts[1])
    if owner_host == host:
        return pid != os.getpid() and not _pid_alive(pid)
    return time.time() - path.stat().st_mtime > FOREIGN_STALE_SECONDS


def remove_stale_staging(model_dir: PathLike) -> list[Path]:
    """Delete staging dirs under ``model_dir`` whose writing process is gone; return them."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return []
    host = _host()
    removed = []
    for path in model_dir.iterdir():
        if path.is_dir() and path.name.startswith(STAGING_PREFIX) and _is_stale(path, host):
            log.info("removing stale staging directory %s", path)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _host() -> str:
    return socket.gethostname().replace("-", "_") or "host"


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    _fsync_dir(root)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Staging:
    """A staging directory for one new version; a context manager.

    The directory sits beside the versions under a non-numeric name
    (``.export-<host>-<pid>-<token>``), which TF Serving's file-system source
    and the embedded server ignore. ``path`` is where the writer writes.
    :meth:`publish` renames it to ``model_dir/<version>`` (one ``rename(2)``
    on the same file system) and returns that path. Leaving the context
    without publishing (an exception) deletes the staging directory; one
    left by a killed process is deleted by the next :class:`Staging` of that
    model (or :func:`remove_stale_staging`) once its process is gone. With
    ``version=None`` the next free version is taken at publish time, so two
    concurrent writers of one model get different numbers.
    """

    def __init__(self, model_dir: PathLike, version: Optional[int] = None) -> None:
        self.base = Path(model_dir)
        self.version = version
        self.path = self.base / f"{STAGING_PREFIX}{_host()}-{os.getpid()}-{secrets.token_hex(4)}"
        self.published: Optional[Path] = None

    def check_version_free(self) -> None:
        """Raise :class:`VersionExists` if the requested version is already there."""
        if self.version is not None and (self.base / str(self.version)).exists():
            raise VersionExists(f"version {self.version} already exists at {self.base / str(self.version)}")

    def __enter__(self) -> "Staging":
        if self.version is not None and self.version < 0:
            raise ValueError(f"version must be a non-negative integer, got {self.version}")
        self.check_version_free()
        self.base.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(self.base)
        self.path.mkdir()
        return self

    def publish(self) -> Path:
        """Make the staged version visible (atomic rename); return its directory."""
        _fsync_tree(self.path)
        while True:
            version = self.version if self.version is not None else next_version(self.base)
            target = self.base / str(version)
            if target.exists():
                if self.version is not None:
                    raise VersionExists(f"version {version} already exists at {target}")
                continue
            try:
                os.rename(self.path, target)
            except OSError:
                if self.version is not None or not target.exists():
                    raise
                continue
            _fsync_dir(self.base)
            self.published = target
            return target

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if self.published is None:
            shutil.rmtree(self.path, ignore_errors=True)
