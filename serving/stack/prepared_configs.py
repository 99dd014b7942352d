"""The stacks' persistent served configs: the embedded one, reconciled with the model repository at each
start, and compose's configs directory (:func:`prepare_compose_configs`).

``<work dir>/models.config`` (TF Serving's ``ModelServerConfig`` text format):

- The first start creates it from the repository: every model directory
  with a numeric version serves its newest version, ``stable`` and
  ``canary`` on it.
- Later starts keep it as it is (models added with ``python -m
  serving.config add`` and the rollout's versions and labels survive),
  except that a model new in the repository is added, unless ``serving.config
  remove`` took it out (``stack.json`` remembers), and a model whose directory
  has no version left is dropped.
"""
from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from serving.config import load_model_server_config
from serving.config.edit import without_model
from serving.config.models import new_model_server_config, repository_models, served_entry, write_model_server_config
from serving.config.rollbacks import stable_version
from serving.config.served_config import ServedConfig

if TYPE_CHECKING:  # tensorflow_serving's protos load only when a config is read
    from tensorflow_serving.config.model_server_config_pb2 import ModelServerConfig

__all__ = ["MODELS_CONFIG", "EMBEDDED_HEADER", "prepare_served_config", "prepare_compose_configs"]

# The persistent models config of the embedded stack, in the work directory.
MODELS_CONFIG = "models.config"
EMBEDDED_HEADER = """\
# The models the embedded stack serves (make up; TF Serving's ModelServerConfig text format).
# Created from the model repository on the first start and kept across restarts: change it with
# `python -m serving.config add|remove` and `python -m serving.rollout`, which also push it to the
# running server. make up adds models new in the repository (not those `remove` took out).
"""


def prepare_served_config(path: Path, model_repo: Path, *, removed: Sequence[str] = (),
                          log: Callable[[str], None] = print) -> Optional[ModelServerConfig]:
    """The persistent served config at ``path``, brought up to date with ``model_repo`` (module doc).

    Written only when it changes. None, after logging why, when a model
    names a version that is not on disk (the server would wait for it).
    """
    served = ServedConfig(path, "", {})
    if path.is_file():
        config = load_model_server_config(path)
        config.model_config_list.SetInParent()
        changed = False
    else:
        config, changed = new_model_server_config(), True
        config.model_config_list.SetInParent()
        log(f"make up: creating {path} from the model repository {model_repo}")
    for entry in list(config.model_config_list.config):
        if not served.versions_on_disk(entry):
            log(f"make up: {entry.name}: no version under {entry.base_path} any more; no longer served")
            config, changed = without_model(config, entry.name), True
    configured = {e.name for e in config.model_config_list.config}
    for name in repository_models(model_repo):
        if name not in configured and name not in removed:
            newest = stable_version(model_repo / name)  # the newest version not rolled back
            if newest is None:
                log(f"make up: {name}: every version was rolled back; not served (serving.config add --version N)")
                continue
            log(f"make up: {name}: found in the model repository; serving version {newest} (stable, canary)")
            served_entry(config, name, str(model_repo / name), newest)
            changed = True
    problems = served.problems(config)
    if problems:
        for problem in problems:
            log(f"make up: {path}: {problem}")
        log("make up: fix it with `python -m serving.config remove NAME` or by publishing the version")
        return None
    if changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_model_server_config(config, path, header=EMBEDDED_HEADER)
    return config


def prepare_compose_configs(config_dir: Path, defaults: Path, command: Sequence[str], target: str,
                            *, log: Callable[[str], None] = print) -> list[Path]:
    """The directory compose mounts as tfserving's ``target`` (``/etc/tfserving``), ready: every file
    ``command`` names under ``target``, from ``defaults`` (the tracked ``serving/``).

    The models config (``--model_config_file``) is the served config: copied from ``defaults`` only when
    it is missing (the first ``make up``), then left to ``serving.config`` and ``serving.rollout``, so
    the tracked file stays the default. Every other file (batching, monitoring) is a copy of its
    default, refreshed when the default changed. Files are replaced atomically (write, then rename);
    the directory is mounted, not the files, so the container sees each new file. The files written.
    """
    config_dir = Path(config_dir)
    config_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for item in command:
        flag, sep, value = item.partition("=")
        inside = PurePosixPath(value)
        if not sep or PurePosixPath(target) not in inside.parents:
            continue
        relative = inside.relative_to(target)
        source, dest = Path(defaults) / relative, config_dir / relative
        seeded_once = flag.lstrip("-") == "model_config_file"
        if dest.is_file() and (seeded_once or dest.read_bytes() == source.read_bytes()):
            continue
        if seeded_once:
            log(f"make up: serving {dest} (created from {source}: serving.config and serving.rollout change it; "
                f"{source} stays the default)")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
        tmp.write_bytes(source.read_bytes())
        tmp.chmod(0o644)
        tmp.replace(dest)
        written.append(dest)
    return written
