"""``models.config``: the zoo's published names, rendering and checking.

The served set is the zoo's models times their variants, under the
exporter's published names (fp32 → ``name``, xla → ``name_xla``, trt-fp16 →
``name_trt_fp16``). TRT variants are GPU-only: TF Serving's CPU image (and
the embedded server) cannot run TensorRT engines, so the CPU models config is
the GPU one without them.

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

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable, Mapping, Optional, Sequence

__all__ = [
    "PublishedModel",
    "ZOO",
    "LABELS",
    "CONTAINER_MODELS_DIR",
    "HEADER",
    "published_name",
    "render_model_server_config",
    "without_gpu_only",
    "remap_base_paths",
    "format_model_server_config",
    "write_model_server_config",
    "model_versions",
    "check_model_server_config",
    "check_model_dirs",
    "check_in_sync",
    "check_against_exporter",
]

CONTAINER_MODELS_DIR = "/models"
LABELS = ("stable", "canary")


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
        return self.variant.startswith("trt")


def published_name(model: str, variant: str = "fp32") -> str:
    """The exporter's published name: ``digits``, ``digits_xla``, ``resnet50_trt_fp16``."""
    return model if variant == "fp32" else f"{model}_{variant.replace('-', '_')}"


ZOO: tuple[PublishedModel, ...] = (
    PublishedModel("digits"),
    PublishedModel("digits", "xla"),
    PublishedModel("resnet50"),
    PublishedModel("resnet50", "xla"),
    PublishedModel("resnet50", "trt-fp16"),
    PublishedModel("text"),
    PublishedModel("ranker"),
)


def _new_config():
    from tensorflow_serving.config import model_server_config_pb2

    return model_server_config_pb2.ModelServerConfig()


def render_model_server_config(models: Iterable[PublishedModel] = ZOO, *,
                               base_path_prefix: str = CONTAINER_MODELS_DIR,
                               models_dir: Optional[Path] = None,
                               include_gpu_only: bool = True):
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


def without_gpu_only(config, models: Iterable[PublishedModel] = ZOO):
    """A copy of ``config`` without the GPU-only (TensorRT) models."""
    gpu_only = {m.name for m in models if m.gpu_only}
    out = _new_config()
    out.CopyFrom(config)
    del out.model_config_list.config[:]
    for entry in config.model_config_list.config:
        if entry.name not in gpu_only:
            out.model_config_list.config.add().CopyFrom(entry)
    return out


def remap_base_paths(config, mapping: Mapping[str, str]):
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


def format_model_server_config(config, header: str = HEADER) -> str:
    """The text-proto form of ``config`` with a comment header."""
    from google.protobuf import text_format

    return header + text_format.MessageToString(config)


def write_model_server_config(config, path: Path, header: str = HEADER) -> Path:
    """Write ``config`` to ``path`` atomically (rename), so a polling server never reads half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(format_model_server_config(config, header))
    tmp.replace(path)
    return path


def model_versions(base: Path) -> list[int]:
    """Numeric version directories under ``base``, ascending (TF Serving ignores the rest)."""
    base = Path(base)
    if not base.is_dir():
        return []
    return sorted(int(p.name) for p in base.iterdir() if p.is_dir() and p.name.isdigit())


def _policy_versions(entry) -> Optional[list[int]]:
    policy = entry.model_version_policy
    return list(policy.specific.versions) if policy.WhichOneof("policy_choice") == "specific" else None


def check_model_server_config(config, *, models: Sequence[PublishedModel] = ZOO,
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


def _check_entry(entry, base_path_prefix: str) -> list[str]:
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


def check_model_dirs(config, models_dir: Path, *,
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


def check_in_sync(gpu_config, cpu_config, models: Iterable[PublishedModel] = ZOO) -> list[str]:
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


def check_against_exporter(models: Sequence[PublishedModel] = ZOO) -> list[str]:
    """Problems if ``models`` disagree with the exporter's zoo, variants or naming.

    Imports only the exporter's registries (no TensorFlow); an exporter that is
    not importable is itself a problem.
    """
    try:
        from exporter.variants import VARIANTS, published_name as exporter_name
        from exporter.zoo import MODELS
    except ImportError as exc:
        return [f"cannot import the exporter's zoo to compare names: {exc}"]
    problems = [f"{m.name}: zoo model {m.model!r} is not in exporter.zoo.MODELS"
                for m in models if m.model not in MODELS]
    problems += [f"{m.name}: variant {m.variant!r} is not in exporter.variants.VARIANTS"
                 for m in models if m.variant not in VARIANTS]
    problems += [f"{m.name}: the exporter publishes it as {exporter_name(m.model, m.variant)!r}"
                 for m in models if m.model in MODELS and m.variant in VARIANTS
                 and exporter_name(m.model, m.variant) != m.name]
    problems += [f"{name}: in exporter.zoo.MODELS but served by no config" for name in sorted(
        set(MODELS) - {m.model for m in models})]
    return problems
