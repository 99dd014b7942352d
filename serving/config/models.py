"""``models.config``: rendering and checking it, for the zoo and for any model.

The compose files (``serving/models.config`` and ``models.cpu.config``) start
as the zoo table (``serving.model_repo.ZOO``: the zoo's models times their
variants, under their published names, fp32 → ``name``, xla → ``name_xla``,
trt-fp16 → ``name_trt_fp16``). TRT variants are GPU-only: TF Serving's CPU
image (and the embedded server) cannot run TensorRT engines, so the CPU models
config is the GPU one without them. Whether the exporter's zoo agrees with
that table is a test (``tests/config/test_zoo_table.py``). The embedded stack
serves a config rendered from what a model repository holds
(:func:`render_repository_config`), zoo or not.

Checks hold any model to TF Serving's rules (absolute base path, platform
``tensorflow``, labels named ``[a-zA-Z0-9_]+`` on served versions); a model
outside the zoo must also have a version under its base path. Only zoo names
are held to the exporter's layout (``<dir>/<published name>``).

Policies and labels follow TF Serving's label rule: every model is served
with a ``specific`` version list and its ``stable``/``canary`` labels point
into that list. A fresh repository holds version 1 only, so a fresh stack
serves version 1 with both labels on it; publishing version 2 changes nothing
until a rollout adds it to the list (``python -m serving.rollout``). With
``latest`` a new version would replace the labelled one behind the labels'
back. TF Serving assigns a config's labels *before* it loads that config's
models (``ServerCore::ReloadConfig``), so labels in the startup config need
``--allow_version_labels_for_unavailable_models`` (set in the compose
command); moving an existing label still needs an AVAILABLE target.
"""
from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Iterable, Mapping, Optional, Sequence

from google.protobuf import text_format

from serving.config.names import model_name_problem
from serving.config.rollbacks import stable_version
from serving.model_repo import ZOO, PublishedModel, model_versions

if TYPE_CHECKING:  # tensorflow_serving's protos load only when a config is built
    from tensorflow_serving.config.model_server_config_pb2 import ModelConfig, ModelServerConfig

__all__ = [
    "LABELS",
    "LABEL_PATTERN",
    "CONTAINER_MODELS_DIR",
    "HEADER",
    "new_model_server_config",
    "served_entry",
    "render_model_server_config",
    "render_repository_config",
    "repository_models",
    "without_gpu_only",
    "remap_base_paths",
    "format_model_server_config",
    "write_model_server_config",
    "check_model_server_config",
    "check_model_dirs",
    "check_in_sync",
]

CONTAINER_MODELS_DIR = "/models"
LABELS = ("stable", "canary")
# TF Serving's rule for version label names (ServerCore::UpdateModelVersionLabelMap).
LABEL_PATTERN = re.compile(r"[a-zA-Z0-9_]+")


def new_model_server_config() -> ModelServerConfig:
    """An empty ``tensorflow.serving.ModelServerConfig``."""
    from tensorflow_serving.config import model_server_config_pb2  # tensorflow_serving: only when a config is built

    return model_server_config_pb2.ModelServerConfig()


def served_entry(config: ModelServerConfig, name: str, base_path: str, version: int) -> ModelConfig:
    """Append ``name`` to ``config``, serving ``version`` with ``stable`` and ``canary`` on it."""
    entry = config.model_config_list.config.add()
    entry.name = name
    entry.base_path = base_path
    entry.model_platform = "tensorflow"
    entry.model_version_policy.specific.versions.append(version)
    for label in LABELS:
        entry.version_labels[label] = version
    return entry


def render_model_server_config(models: Iterable[PublishedModel] = ZOO, *,
                               base_path_prefix: str = CONTAINER_MODELS_DIR,
                               models_dir: Optional[Path] = None,
                               include_gpu_only: bool = True) -> ModelServerConfig:
    """A ``ModelServerConfig`` serving ``models`` under ``base_path_prefix/<name>``.

    Each model serves one version, labelled ``stable`` and ``canary``: the
    newest numeric version found in ``models_dir/<name>`` that was not rolled
    back (``serving.config.rollbacks``) when given and present, else 1 (what
    the exporter publishes first).
    """
    config = new_model_server_config()
    for model in models:
        if model.gpu_only and not include_gpu_only:
            continue
        found = stable_version(models_dir / model.name) if models_dir else None
        served_entry(config, model.name, str(PurePosixPath(base_path_prefix) / model.name),
                     found if found is not None else 1)
    return config


def repository_models(model_repo: Path) -> list[str]:
    """The model directories of ``model_repo`` that hold a numeric version, by name."""
    model_repo = Path(model_repo)
    if not model_repo.is_dir():
        return []
    return sorted(p.name for p in model_repo.iterdir() if p.is_dir() and model_versions(p))


def render_repository_config(model_repo: Path, names: Optional[Iterable[str]] = None) -> ModelServerConfig:
    """A ``ModelServerConfig`` serving what ``model_repo`` holds, with host base paths.

    Every model directory with a numeric version (or only ``names``) serves
    its newest version that was not rolled back (``serving.config.rollbacks``)
    with ``stable`` and ``canary`` on it, as the zoo's models do in the compose
    files; a model whose every version was rolled back is left out.
    """
    model_repo = Path(model_repo).resolve()
    config = new_model_server_config()
    config.model_config_list.SetInParent()  # an empty list is still a list (not "no config")
    for name in repository_models(model_repo) if names is None else names:
        version = stable_version(model_repo / name)
        if version is not None:
            served_entry(config, name, str(model_repo / name), version)
    return config


def without_gpu_only(config: ModelServerConfig, models: Iterable[PublishedModel] = ZOO) -> ModelServerConfig:
    """A copy of ``config`` without the GPU-only (TensorRT) models."""
    gpu_only = {m.name for m in models if m.gpu_only}
    out = new_model_server_config()
    out.CopyFrom(config)
    del out.model_config_list.config[:]
    for entry in config.model_config_list.config:
        if entry.name not in gpu_only:
            out.model_config_list.config.add().CopyFrom(entry)
    return out


def remap_base_paths(config: ModelServerConfig, mapping: Mapping[str, str]) -> ModelServerConfig:
    """A copy of ``config`` whose base paths under a ``mapping`` key move to its value.

    ``{"/models": "/srv/tfs-stack/models"}`` turns ``/models/digits`` into
    ``/srv/tfs-stack/models/digits``; the longest matching prefix wins. A base path
    under no key raises ValueError (it would not exist where the copy is used).
    """
    out = new_model_server_config()
    out.CopyFrom(config)
    for entry in out.model_config_list.config:
        entry.base_path = _remap_path(entry.base_path, mapping)
    return out


def _remap_path(path: str, mapping: Mapping[str, str]) -> str:
    pure = PurePosixPath(path)
    for prefix in sorted(mapping, key=len, reverse=True):
        if pure == PurePosixPath(prefix) or PurePosixPath(prefix) in pure.parents:
            return str(Path(mapping[prefix]) / pure.relative_to(prefix))
    raise ValueError(f"base_path {path} is under none of {sorted(mapping)}")


HEADER = """\
# TF Serving model config (text ModelServerConfig), read by tensorflow_model_server
# --model_config_file and by the embedded server. Written by `python -m serving.config render`;
# `python -m serving.rollout` moves versions and labels in it (the file is the rollout's state).
# Every model serves a `specific` version list; `stable` and `canary` point into it. TF Serving
# moves a label only to an AVAILABLE version; labels of the startup config need the server flag
# --allow_version_labels_for_unavailable_models (docker-compose.yml sets it).
"""


def format_model_server_config(config: ModelServerConfig, header: str = HEADER) -> str:
    """The text-proto form of ``config`` with a comment header."""
    return header + text_format.MessageToString(config)


def write_model_server_config(config: ModelServerConfig, path: Path, header: str = HEADER) -> Path:
    """Write ``config`` to ``path`` atomically (a temp file renamed over it), so a polling server
    never reads half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(format_model_server_config(config, header))
    tmp.replace(path)
    return path


def _policy_versions(entry: ModelConfig) -> Optional[list[int]]:
    policy = entry.model_version_policy
    return list(policy.specific.versions) if policy.WhichOneof("policy_choice") == "specific" else None


def check_model_server_config(config: ModelServerConfig, *, models_dir: Optional[Path] = None,
                              base_path_prefix: str = CONTAINER_MODELS_DIR,
                              zoo: Sequence[PublishedModel] = ZOO) -> list[str]:
    """Problems with ``config``; empty when fine.

    Every model: a name that keeps ``serving.config.names``' rule, listed once, platform ``tensorflow``, labels named
    ``[a-zA-Z0-9_]+`` on versions a ``specific`` policy serves. A zoo name
    must live where the exporter publishes it (``<dir>/<name>``). A model
    outside the zoo must hold a numeric version under its base path, where
    ``base_path_prefix/<name>`` is looked up as ``models_dir/<name>`` (not
    checked when ``models_dir`` is None); the zoo's own exports are checked
    by :func:`check_model_dirs`, which a fresh clone has not run yet.
    """
    problems: list[str] = []
    names = [e.name for e in config.model_config_list.config]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{name}: configured more than once")
    zoo_names = {m.name for m in zoo}
    for entry in config.model_config_list.config:
        problems.extend(_check_entry(entry, in_zoo=entry.name in zoo_names))
        if entry.name not in zoo_names and models_dir is not None:
            problems.extend(_check_has_versions(entry, models_dir, base_path_prefix))
    return problems


def _check_entry(entry: ModelConfig, *, in_zoo: bool) -> list[str]:
    problems = []
    name_problem = model_name_problem(entry.name)
    if name_problem is not None:
        problems.append(name_problem)
    base = PurePosixPath(entry.base_path)
    if in_zoo and base.name != entry.name:
        problems.append(f"{entry.name}: base_path {entry.base_path} is not {base.parent / entry.name}, "
                        "where the exporter publishes it")
    if not base.is_absolute() and "://" not in entry.base_path:
        problems.append(f"{entry.name}: base_path {entry.base_path!r} is not absolute; TF Serving requires "
                        "an absolute path or URI")
    if entry.model_platform not in ("", "tensorflow"):
        problems.append(f"{entry.name}: model_platform {entry.model_platform!r} is not 'tensorflow'")
    versions = _policy_versions(entry)
    for label, version in sorted(entry.version_labels.items()):
        if not LABEL_PATTERN.fullmatch(label):
            problems.append(f"{entry.name}: label {label!r} is not a valid label name; "
                            "labels must match [a-zA-Z0-9_]+")
        if versions is not None and version not in versions:
            problems.append(f"{entry.name}: label {label} -> {version} points outside the "
                            f"served versions {versions}; TF Serving rejects a label on a version "
                            "that is not AVAILABLE")
    return problems


def _check_has_versions(entry: ModelConfig, models_dir: Path, base_path_prefix: str) -> list[str]:
    try:
        base = Path(_remap_path(entry.base_path, {base_path_prefix: str(models_dir)}))
    except ValueError:
        base = Path(entry.base_path)
    if model_versions(base):
        return []
    return [f"{entry.name}: no numeric version directory under {base} (not a zoo model: export it "
            "there first; TF Serving would wait for a version forever)"]


def check_model_dirs(config: ModelServerConfig, models_dir: Path, *,
                     base_path_prefix: str = CONTAINER_MODELS_DIR,
                     zoo: Sequence[PublishedModel] = ZOO) -> list[str]:
    """Problems with the exported repository behind ``config``; empty when fine.

    Each base path ``<prefix>/<name>`` maps to ``models_dir/<name>`` (a base
    path outside the prefix is a host path), which must hold numeric version
    directories with a SavedModel, including every version the policy or a
    label names; zoo models also need the exporter's ``manifest.json``.
    """
    problems = []
    zoo_names = {m.name for m in zoo}
    for entry in config.model_config_list.config:
        try:
            base = Path(_remap_path(entry.base_path, {base_path_prefix: str(models_dir)}))
        except ValueError:
            base = Path(entry.base_path)
        found = model_versions(base)
        if not found:
            problems.append(f"{entry.name}: no numeric version directory under {base} "
                            f"(export it: python -m exporter ensure --model-repo {models_dir} {entry.name})")
            continue
        wanted = set(_policy_versions(entry) or [found[-1]]) | set(entry.version_labels.values())
        for version in sorted(wanted):
            problems.extend(_check_version_dir(entry.name, base / str(version), entry.name in zoo_names))
    return problems


def _check_version_dir(name: str, version_dir: Path, from_exporter: bool) -> list[str]:
    if not version_dir.is_dir():
        return [f"{name}: version {version_dir.name} is configured but {version_dir} does not exist"]
    files = ("saved_model.pb", "manifest.json") if from_exporter else ("saved_model.pb",)
    missing = [f for f in files if not (version_dir / f).is_file()]
    return [f"{name}: {version_dir} has no {f}" for f in missing]


def check_in_sync(gpu_config: ModelServerConfig, cpu_config: ModelServerConfig, models: Iterable[PublishedModel] = ZOO) -> list[str]:
    """Problems if the CPU config is not the GPU config minus its GPU-only models."""
    expected = without_gpu_only(gpu_config, models)
    if expected == cpu_config:
        return []
    want = {e.name: e for e in expected.model_config_list.config}
    have = {e.name: e for e in cpu_config.model_config_list.config}
    problems = [f"{n}: in the GPU config but not the CPU config" for n in sorted(set(want) - set(have))]
    problems += [f"{n}: in the CPU config but not the GPU config (or GPU-only)"
                 for n in sorted(set(have) - set(want))]
    problems += [f"{n}: differs between the GPU and the CPU config"
                 for n in sorted(set(want) & set(have)) if want[n] != have[n]]
    return problems or ["the CPU config lists the models in another order than the GPU config"]

