"""Adding and removing a model in a models config, checked like TF Serving checks it.

Pure functions on ``ModelServerConfig`` protos and the version numbers found
on disk; nothing here talks to a server (``serving.config.reload`` pushes the
steps planned here). Any model, zoo or not:

- a version policy is ``latest:N``, ``all`` or ``versions:1,2``
  (:class:`VersionPolicy`, TF Serving's ``ServableVersionPolicy``);
- labels are ``NAME=VERSION``; a name matches ``[a-zA-Z0-9_]+`` and the
  version is one the policy serves (TF Serving moves a label only to an
  AVAILABLE version);
- a base path must hold the versions the policy serves: TF Serving waits for
  a missing one, and with it every later config reload, so a config whose
  base path is empty is refused before it is sent (:func:`entry_problems`).

Adding is two steps (:func:`add_steps`): serve the versions without labels,
then label them once they are AVAILABLE, which TF Serving accepts with or
without ``--allow_version_labels_for_unavailable_models``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

from serving.config.models import LABEL_PATTERN, new_model_server_config
from serving.config.reload import Step

if TYPE_CHECKING:  # tensorflow_serving's protos load only when a config is built
    from tensorflow_serving.config.model_server_config_pb2 import ModelConfig, ModelServerConfig

__all__ = [
    "VersionPolicy",
    "parse_labels",
    "model_entry",
    "find_entry",
    "entry_problems",
    "with_model",
    "without_model",
    "add_steps",
    "remove_steps",
]


@dataclass(frozen=True)
class VersionPolicy:
    """TF Serving's ``ServableVersionPolicy``: ``latest`` N, ``all`` or ``specific`` versions."""

    kind: str = "latest"
    num_versions: int = 1
    versions: tuple[int, ...] = ()

    @classmethod
    def parse(cls, text: str) -> "VersionPolicy":
        """``latest:N`` (``latest`` = ``latest:1``), ``all`` or ``versions:1,2``; ValueError otherwise."""
        kind, _, arg = text.partition(":")
        try:
            if kind == "latest":
                policy = cls("latest", num_versions=int(arg or 1))
            elif kind == "all" and not arg:
                policy = cls("all")
            elif kind == "versions" and arg:
                policy = cls("specific", versions=tuple(sorted({int(v) for v in arg.split(",")})))
            else:
                raise ValueError(text)
        except ValueError:
            raise ValueError(f"invalid version policy {text!r}: use latest:N, all or versions:1,2") from None
        if policy.num_versions < 1 or any(v < 0 for v in policy.versions):
            raise ValueError(f"invalid version policy {text!r}: N must be >= 1 and versions >= 0")
        return policy

    @classmethod
    def of(cls, entry: ModelConfig) -> "VersionPolicy":
        """The policy of a ``ModelConfig`` (none set: TF Serving's default, ``latest:1``)."""
        policy = entry.model_version_policy
        kind = policy.WhichOneof("policy_choice")
        if kind == "specific":
            return cls("specific", versions=tuple(sorted(set(policy.specific.versions))))
        if kind == "all":
            return cls("all")
        return cls("latest", num_versions=policy.latest.num_versions if kind == "latest" else 1)

    def served(self, on_disk: Sequence[int]) -> list[int]:
        """The versions this policy serves out of ``on_disk`` (specific: its list, found or not)."""
        if self.kind == "specific":
            return list(self.versions)
        found = sorted(set(on_disk))
        return found if self.kind == "all" else found[-self.num_versions:]

    def set_on(self, entry: ModelConfig) -> None:
        """Write this policy into ``entry.model_version_policy``."""
        entry.ClearField("model_version_policy")
        if self.kind == "specific":
            entry.model_version_policy.specific.versions.extend(self.versions)
        elif self.kind == "all":
            entry.model_version_policy.all.SetInParent()
        else:
            entry.model_version_policy.latest.num_versions = self.num_versions


def parse_labels(items: Sequence[str]) -> dict[str, int]:
    """``["stable=1", "canary=2"]`` → ``{"stable": 1, "canary": 2}``; ValueError on a bad item."""
    labels: dict[str, int] = {}
    for item in items:
        name, sep, version = item.partition("=")
        if not sep or not version.strip().isdigit():
            raise ValueError(f"invalid label {item!r}: use NAME=VERSION, e.g. stable=1")
        labels[name.strip()] = int(version)
    return labels


def model_entry(name: str, base_path: str, policy: VersionPolicy,
                labels: Mapping[str, int] = {}) -> ModelConfig:
    """A ``ModelConfig`` for ``name`` (platform ``tensorflow``)."""
    entry = new_model_server_config().model_config_list.config.add()
    entry.name, entry.base_path, entry.model_platform = name, base_path, "tensorflow"
    policy.set_on(entry)
    entry.version_labels.update(labels)
    return entry


def find_entry(config: ModelServerConfig, name: str) -> ModelConfig:
    """The ``ModelConfig`` named ``name``; KeyError naming the models the config has."""
    for entry in config.model_config_list.config:
        if entry.name == name:
            return entry
    raise KeyError(f"model {name!r} is not in the config (it has: "
                   f"{', '.join(e.name for e in config.model_config_list.config) or 'no models'})")


def entry_problems(entry: ModelConfig, on_disk: Sequence[int], where: str) -> list[str]:
    """Why pushing ``entry`` would fail or hang, given the versions ``on_disk`` at ``where``
    (the base path as this host sees it); empty when it is fine."""
    if not entry.name:
        return ["a model needs a name"]
    if not on_disk:
        return [f"{entry.name}: no version directory under {where}; TF Serving would wait for one, "
                "and hold every later config reload, until it restarts"]
    policy = VersionPolicy.of(entry)
    served = policy.served(on_disk)
    problems = [f"{entry.name}: version {v} is configured but {where}/{v} does not exist"
                for v in served if v not in on_disk]
    for label, version in sorted(entry.version_labels.items()):
        if not LABEL_PATTERN.fullmatch(label):
            problems.append(f"{entry.name}: invalid version label {label!r}: labels must match [a-zA-Z0-9_]+")
        elif version not in served:
            problems.append(f"{entry.name}: label {label} -> {version} is not a version the policy serves "
                            f"({served}); TF Serving assigns labels only to AVAILABLE versions")
    return problems


def with_model(config: ModelServerConfig, entry: ModelConfig) -> ModelServerConfig:
    """A copy of ``config`` with ``entry`` appended; ValueError if its name is taken."""
    if any(e.name == entry.name for e in config.model_config_list.config):
        raise ValueError(f"model {entry.name!r} is already in the config (remove it first, or move its "
                         "versions and labels with python -m serving.rollout)")
    out = new_model_server_config()
    out.CopyFrom(config)
    out.model_config_list.config.add().CopyFrom(entry)
    return out


def without_model(config: ModelServerConfig, name: str) -> ModelServerConfig:
    """A copy of ``config`` without ``name``; KeyError if it is not there."""
    find_entry(config, name)
    out = new_model_server_config()
    out.CopyFrom(config)
    del out.model_config_list.config[:]
    out.model_config_list.SetInParent()
    for entry in config.model_config_list.config:
        if entry.name != name:
            out.model_config_list.config.add().CopyFrom(entry)
    return out


def add_steps(config: ModelServerConfig, entry: ModelConfig, on_disk: Sequence[int]) -> list[Step]:
    """Steps adding ``entry``: load its versions unlabelled, then label them (one step without labels)."""
    served = tuple(VersionPolicy.of(entry).served(on_disk))
    unlabelled = type(entry)()
    unlabelled.CopyFrom(entry)
    unlabelled.ClearField("version_labels")
    steps = [Step(f"add {entry.name} ({entry.base_path}), serving versions {list(served)}",
                  with_model(config, unlabelled), served)]
    if entry.version_labels:
        labels = ", ".join(f"{k} -> {v}" for k, v in sorted(entry.version_labels.items()))
        steps.append(Step(f"label {entry.name}: {labels}", with_model(config, entry), served))
    return steps


def remove_steps(config: ModelServerConfig, name: str) -> list[Step]:
    """The one step removing ``name`` (TF Serving unloads its versions)."""
    return [Step(f"remove {name} (its versions unload)", without_model(config, name), ())]
