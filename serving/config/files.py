"""The config files a server starts from, and the TF Serving flags that point at them.

The one writer of a server's startup files for a set of models: ``models.config``
(``ModelServerConfig``: each model served with TF Serving's default policy, its
latest version), ``monitoring.config`` (``MonitoringConfig``: the Prometheus
page at :data:`MONITORING_PATH`) and, with batching, ``batching.config``
(``BatchingParameters``). The embedded server's launcher, the load tools and
the benchmarks write them through :func:`write_config_files`; the stack's own
persistent config (labels, specific versions) is written by
``serving.config.models``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, Union

from google.protobuf import text_format
from google.protobuf.message import Message

from serving.config.models import new_model_server_config
from serving.config.protos import batching_parameters_class, monitoring_config_class

__all__ = [
    "MONITORING_PATH",
    "BatchingSpec",
    "model_config_text",
    "batching_config_text",
    "monitoring_config_text",
    "write_config_files",
]

MONITORING_PATH = "/monitoring/prometheus/metrics"

# ``BatchingParameters`` as the proto itself or as ``{field: value}`` for its wrapper fields.
BatchingSpec = Union[Message, Mapping[str, int]]


def model_config_text(models: Mapping[str, Path]) -> str:
    """A ``ModelServerConfig`` text proto serving each ``name → base_path``."""
    config = new_model_server_config()
    for name, base_path in models.items():
        entry = config.model_config_list.config.add()
        entry.name, entry.base_path, entry.model_platform = name, str(base_path), "tensorflow"
    return text_format.MessageToString(config)


def batching_config_text(params: BatchingSpec) -> str:
    """A ``BatchingParameters`` text proto from the proto itself or a ``{field: value}`` mapping (a list for
    the repeated ``allowed_batch_sizes``)."""
    if isinstance(params, Message):
        return text_format.MessageToString(params)
    proto = batching_parameters_class()()
    for name, value in params.items():
        if isinstance(value, (list, tuple)):
            getattr(proto, name).extend(value)
        else:
            getattr(proto, name).value = value
    return text_format.MessageToString(proto)


def monitoring_config_text(path: str = MONITORING_PATH) -> str:
    """A ``MonitoringConfig`` text proto with the Prometheus page on at ``path``."""
    config = monitoring_config_class()()
    config.prometheus_config.enable, config.prometheus_config.path = True, path
    return text_format.MessageToString(config)


def write_config_files(workdir: Path, models: Mapping[str, Path], *,
                       batching: Optional[BatchingSpec] = None) -> list[str]:
    """Write ``models.config``, ``monitoring.config`` (and ``batching.config``) into ``workdir``.

    Returns TF Serving's flags that point at them; ``batching=None`` serves
    without batching, a mapping or a proto turns on ``--enable_batching``.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "models.config").write_text(model_config_text(models))
    (workdir / "monitoring.config").write_text(monitoring_config_text())
    flags = [f"--model_config_file={workdir / 'models.config'}",
             f"--monitoring_config_file={workdir / 'monitoring.config'}"]
    if batching is not None:
        (workdir / "batching.config").write_text(batching_config_text(batching))
        flags += ["--enable_batching=true", f"--batching_parameters_file={workdir / 'batching.config'}"]
    return flags
