"""Validation of a ``ModelConfigList`` as ``ServerCore::ReloadConfig`` does it.

Rules: model names are unique; base paths are absolute (no
``model_config_list_root_dir`` here); the platform is ``tensorflow`` (the
only one this server loads; the deprecated ``model_type: TENSORFLOW`` is
accepted too); a model may not change platform across reloads.
"""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Sequence

from serving import status

if TYPE_CHECKING:  # annotations only
    from tensorflow_serving.config.model_server_config_pb2 import ModelConfig

__all__ = ["TENSORFLOW_PLATFORM", "model_platform", "validate_model_config_list"]

log = logging.getLogger(__name__)

TENSORFLOW_PLATFORM = "tensorflow"
_MODEL_TYPE_TENSORFLOW = 1


def model_platform(config: ModelConfig) -> str:
    """The platform a ``ModelConfig`` asks for (``server_core.cc`` ``GetPlatform``)."""
    if config.model_type:
        log.warning("Deprecated ModelServerConfig::model_type field used. "
                    "Prefer ModelServerConfig::model_platform.")
        if config.model_platform:
            raise status.InvalidArgument(
                "Illegal setting both ModelServerConfig::model_type (deprecated) and "
                f"ModelServerConfig::model_platform, model name is {config.name}")
        if config.model_type != _MODEL_TYPE_TENSORFLOW:
            raise status.InvalidArgument(
                f"ModelServerConfig::model_type choice {config.model_type} not supported.")
        return TENSORFLOW_PLATFORM
    if not config.model_platform:
        raise status.InvalidArgument(
            "Illegal setting neither ModelServerConfig::model_type (deprecated) nor "
            f"ModelServerConfig::model_platform, model name is {config.name}")
    return config.model_platform


def validate_model_config_list(configs: Sequence[ModelConfig], previous: Sequence[ModelConfig] = ()) -> None:
    """Raise ``status.InvalidArgument`` naming the first broken rule."""
    names: set[str] = set()
    for config in configs:
        if config.name in names:
            raise status.InvalidArgument(
                f"Illegal to list model {config.name} multiple times in config list")
        names.add(config.name)
    for config in configs:
        if not os.path.isabs(config.base_path) and "://" not in config.base_path:
            raise status.InvalidArgument(
                f"Expected model {config.name} to have an absolute path or URI; "
                f"got base_path()={config.base_path}")
    old = {c.name: model_platform(c) for c in previous}
    for config in configs:
        platform = model_platform(config)
        if config.name in old and old[config.name] != platform:
            raise status.InvalidArgument(
                f"Illegal to change a model's platform. For model {config.name} platform was "
                f"{old[config.name]} and new platform requested is {platform}")
        if platform != TENSORFLOW_PLATFORM:
            raise status.InvalidArgument(
                f"Model {config.name} requests unsupported platform {platform}")
