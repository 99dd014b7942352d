"""``models.config``: rendering and checking it against the zoo's published names.

The served set is the zoo table (``serving.model_repo.ZOO``: the zoo's models
times their variants, under their published names, fp32 → ``name``, xla →
``name_xla``, trt-fp16 → ``name_trt_fp16``). TRT variants are GPU-only: TF
Serving's CPU image (and the embedded server) cannot run TensorRT engines, so
the CPU models config is the GPU one without them. Whether the exporter's zoo
agrees with that table is a test (``tests/config/test_zoo_table.py``).

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

from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Iterable, Mapping, Optional, Sequence

from google.protobuf import text_format

from serving.model_repo import ZOO, PublishedModel, model_versions

if TYPE_CHECKING:  # tensorflow_serving's protos load only when a config is built
    from tensorflow_serving.config.model_server_config_pb2 import ModelConfig, ModelServerConfig

__all__ = [
    "LABELS",
    "CONTAINER_MODELS_DIR",
    "HEADER",
    "render_model_server_config",
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


def _new_config() -> ModelServerConfig:
    from tensorflow_serving.config import model_server_config_pb2  # tensorflow_serving: only when a config is built

    return model_server_config_pb2.ModelServerConfig()


def render_model_server_config(models: Iterable[PublishedModel] = ZOO, *,
                               base_path_prefix: str = CONTAINER_MODELS_DIR,
                               models_dir: Optional[Path] = None,
                               include_gpu_only: bool = True) -> ModelServerConfig:
    """A ``ModelServerConfig`` serving ``models`` under ``base_path_prefix/<name>``.

    Each model serves one version, labelled ``stable`` and ``canary``: the
    newest numeric version found in ``models_dir/<name>`` when given and
    present, else 1 (what the exporter publishes first).
    """
    config = _new_config()
    for model in models:
        if model.gpu_only and not include_gpu_only:
            continue
        found = model_versions(models_dir / model.name) if models_dir else []
        version = found[-1] if found else 1
        entry = config.model_config_list.config.add()
        entry.name = model.name
        entry.base_path = str(PurePosixPath(base_path_prefix) / model.name)
        entry.model_platform = "tensorflow"
        entry.model_version_policy.specific.versions.append(version)
        for label in LABELS:
            entry.version_labels[label] = version
    return config


def without_gpu_only(config: ModelServerConfig, models: Iterable[PublishedModel] = ZOO) -> ModelServerConfig:
    """A copy of ``config`` without the GPU-only (TensorRT) models."""
    gpu_only = {m.name for m in models if m.gpu_only}
    out = _new_config()
    out.CopyFrom(config)
    del out.model_config_list.config[:]
    for entry in config.model_config_list.config:
        if entry.name not in gpu_only:
            out.model_config_list.config.add().CopyFrom(entry)
    return out


def remap_base_paths(config: ModelServerConfig, mapping: Mapping[str, str]) -> ModelServerConfig:
    """A copy of ``config`` whose base paths under a ``mapping`` key move to its value.

    ``{"/models": "/work/main/models"}`` turns ``/models/digits`` into
    ``/work/main/models/digits``; the longest matching prefix wins. A base path
    under no key raises ValueError (it would not exist where the copy is used).
    """
    out = _new_config()
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
    """Write ``config`` to ``path`` atomically (rename), so a polling server never reads half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(format_model_server_config(config, header))
    tmp.replace(path)
    return path


def _policy_versions(entry: ModelConfig) -> Optional[list[int]]:
    policy = entry.model_version_policy
    return list(policy.specific.versions) if policy.WhichOneof("policy_choice") == "specific" else None


def check_model_server_config(config: ModelServerConfig, *, models: Sequence[PublishedModel] = ZOO,
                              base_path_prefix: str = CONTAINER_MODELS_DIR,
                              include_gpu_only: bool = True) -> list[str]:
    """Problems with ``config`` against the zoo's published names; empty when fine."""
    problems: list[str] = []
    entries = list(config.model_config_list.config)
    expected = [m.name for m in models if include_gpu_only or not m.gpu_only]
    names = [e.name for e in entries]
    for name in sorted(set(expected) - set(names)):
        problems.append(f"{name}: published by the exporter but missing from the config")
    for name in sorted(set(names) - set(expected)):
        problems.append(f"{name}: not a published name of the zoo here "
                        f"(expected one of {', '.join(expected)})")
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{name}: configured more than once")
    for entry in entries:
        problems.extend(_check_entry(entry, base_path_prefix))
    return problems


def _check_entry(entry: ModelConfig, base_path_prefix: str) -> list[str]:
    problems = []
    want = str(PurePosixPath(base_path_prefix) / entry.name)
    if entry.base_path != want:
        problems.append(f"{entry.name}: base_path {entry.base_path} is not {want}, "
                        "where the exporter publishes it")
    if entry.model_platform not in ("", "tensorflow"):
        problems.append(f"{entry.name}: model_platform {entry.model_platform!r} is not 'tensorflow'")
    versions = _policy_versions(entry)
    for label, version in sorted(entry.version_labels.items()):
        if versions is not None and version not in versions:
            problems.append(f"{entry.name}: label {label} -> {version} points outside the "
                            f"served versions {versions}; TF Serving rejects a label on a version "
                            "that is not AVAILABLE")
    return problems


def check_model_dirs(config: ModelServerConfig, models_dir: Path, *,
                     base_path_prefix: str = CONTAINER_MODELS_DIR) -> list[str]:
    """Problems with the exported repository behind ``config``; empty when fine.

    Each base path ``<prefix>/<name>`` maps to ``models_dir/<name>``, which must
    hold numeric version directories with a SavedModel and the exporter's
    ``manifest.json``, including every version the policy or a label names.
    """
    problems = []
    for entry in config.model_config_list.config:
        base = Path(_remap_path(entry.base_path, {base_path_prefix: str(models_dir)}))
        found = model_versions(base)
        if not found:
            problems.append(f"{entry.name}: no numeric version directory under {base} "
                            f"(export it: python -m exporter ensure --model-repo {models_dir} {entry.name})")
            continue
        wanted = set(_policy_versions(entry) or [found[-1]]) | set(entry.version_labels.values())
        for version in sorted(wanted):
            problems.extend(_check_version_dir(entry.name, base / str(version)))
    return problems


def _check_version_dir(name: str, version_dir: Path) -> list[str]:
    if not version_dir.is_dir():
        return [f"{name}: version {version_dir.name} is configured but {version_dir} does not exist"]
    missing = [f for f in ("saved_model.pb", "manifest.json") if not (version_dir / f).is_file()]
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

