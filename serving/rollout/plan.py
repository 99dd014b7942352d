"""Planning label moves as a sequence of configs TF Serving accepts.

Pure functions on ``ModelServerConfig`` protos; nothing here talks to a server.
A plan is a list of ``serving.config.reload.Step`` (re-exported here as the
rollout's vocabulary).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from serving.config.reload import ReloadError, Step

if TYPE_CHECKING:  # tensorflow_serving's protos load only when a config is read
    from tensorflow_serving.config.model_server_config_pb2 import ModelConfig, ModelServerConfig

__all__ = [
    "RolloutError",
    "Step",
    "find_model",
    "served_versions",
    "plan_label_move",
    "canary_labels",
    "promote_labels",
    "rollback_labels",
]

STABLE, CANARY = "stable", "canary"


class RolloutError(ReloadError):
    """A rollout that cannot be planned or did not complete."""


def find_model(config: ModelServerConfig, name: str) -> ModelConfig:
    """The ``ModelConfig`` named ``name`` in ``config``; RolloutError if absent."""
    for entry in config.model_config_list.config:
        if entry.name == name:
            return entry
    names = ", ".join(e.name for e in config.model_config_list.config)
    raise RolloutError(f"model {name!r} is not in the config (it has: {names})")


def served_versions(entry: ModelConfig) -> list[int]:
    """The versions a ``specific`` policy serves, ascending.

    Rollouts need the version list spelled out: with ``latest`` a new version
    would replace the labelled one by itself.
    """
    if entry.model_version_policy.WhichOneof("policy_choice") != "specific":
        raise RolloutError(f"model {entry.name!r} has no `specific` version policy; "
                           "rollouts need one (python -m serving.config render writes it)")
    return sorted(set(entry.model_version_policy.specific.versions))


def _with(config: ModelServerConfig, name: str, versions: Sequence[int],
          labels: Mapping[str, int]) -> ModelServerConfig:
    out = type(config)()
    out.CopyFrom(config)
    entry = find_model(out, name)
    entry.model_version_policy.specific.ClearField("versions")
    entry.model_version_policy.specific.versions.extend(sorted(set(versions)))
    entry.version_labels.clear()
    entry.version_labels.update(labels)
    return out


def plan_label_move(config: ModelServerConfig, name: str, labels: Mapping[str, int]) -> list[Step]:
    """Steps from ``config`` to one where ``name`` has exactly ``labels``.

    1. load: serve the labels' new targets beside what is served now;
    2. relabel: move the labels (every target is AVAILABLE by then);
    3. unload: serve only the versions a label names.
    A step that would change nothing is left out, so an empty plan means done.
    """
    entry = find_model(config, name)
    current = served_versions(entry)
    old_labels = dict(entry.version_labels)
    union = sorted(set(current) | set(labels.values()))
    steps, state = [], config
    if union != current:
        state = _with(state, name, union, old_labels)
        steps.append(Step(f"load {name} versions {union} (labels unchanged)", state, tuple(union)))
    if dict(labels) != old_labels:
        state = _with(state, name, union, labels)
        moves = ", ".join(f"{k} -> {v}" for k, v in sorted(labels.items()))
        steps.append(Step(f"move {name} labels: {moves}", state, tuple(sorted(set(labels.values())))))
    final = sorted(set(labels.values()))
    if final != union:
        state = _with(state, name, final, labels)
        steps.append(Step(f"unload {name} versions {sorted(set(union) - set(final))}", state, tuple(final)))
    return steps


def _label(entry: ModelConfig, label: str) -> int:
    if label not in entry.version_labels:
        raise RolloutError(f"model {entry.name!r} has no {label!r} label")
    return entry.version_labels[label]


def canary_labels(config: ModelServerConfig, name: str, version: int) -> dict[str, int]:
    """Labels with ``canary`` on ``version`` and ``stable`` where it is."""
    entry = find_model(config, name)
    return {**entry.version_labels, STABLE: _label(entry, STABLE), CANARY: version}


def promote_labels(config: ModelServerConfig, name: str) -> dict[str, int]:
    """Labels with ``stable`` moved to the canary's version."""
    entry = find_model(config, name)
    return {**entry.version_labels, STABLE: _label(entry, CANARY)}


def rollback_labels(config: ModelServerConfig, name: str) -> dict[str, int]:
    """Labels with ``canary`` back on the stable version."""
    entry = find_model(config, name)
    return {**entry.version_labels, CANARY: _label(entry, STABLE)}
