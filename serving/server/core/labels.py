"""Version labels: validating a config's ``version_labels`` as ``ServerCore`` does.

Rules (``server_core.cc`` ``UpdateModelVersionLabelMap``): a label may only
point at an AVAILABLE version, unless ``allow_version_labels_for_unavailable_models``
is set and the label is new or keeps its version (re-pointing an existing
label still needs the target loaded); with ``allow_version_labels=False`` any
label is rejected. Like TF Serving, the server places no rule on a label's
name (``server_core_test.cc`` assigns "nice try"); a name the REST routes
cannot address (``/labels/([^/:]+)``) is still usable over gRPC. The config
CLIs (``serving.config``) keep their own stricter rule for labels they write.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from serving import status

if TYPE_CHECKING:  # annotations only
    from tensorflow_serving.config.model_server_config_pb2 import ModelConfig

__all__ = ["LabelMap", "build_label_map"]

LabelMap = dict[str, dict[str, int]]
"""model name -> label -> version."""


def build_label_map(model_configs: Iterable[ModelConfig], is_available: Callable[[str, int], bool],
                    current: Mapping[str, Mapping[str, int]], *, allow_version_labels: bool,
                    allow_unavailable: bool) -> LabelMap:
    """The new label map for ``model_configs``; raises ``status.ServingError`` on a broken rule."""
    labels: LabelMap = {}
    for config in model_configs:
        for label, version in sorted(config.version_labels.items()):
            existing = current.get(config.name, {}).get(label)
            may_skip_check = allow_unavailable and (existing is None or existing == version)
            if not may_skip_check and not is_available(config.name, version):
                raise status.FailedPrecondition(
                    f"Request to assign label to version {version} of model {config.name}, "
                    "which is not currently available for inference")
            labels.setdefault(config.name, {})[label] = int(version)
    if not allow_version_labels and labels:
        raise status.FailedPrecondition(
            "Model version labels are not currently allowed by the server.")
    return labels
