"""The tiny model on a server: its flags, tf.Example inputs, and totals read from the Prometheus page."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

import httpx
from tensorflow_serving.apis import input_pb2

from serving import codec
from serving.server.core.manager import ServableManager
from serving.server.server import single_model_config
from serving.server.tensorflow.loader import LoaderOptions, SavedModelLoader
from tests.support.models import export_tiny
from tests.support.servers import EmbeddedServer

__all__ = ["MONITORING_PATH", "tiny_flags", "tiny_repo_at", "tiny_manager_on", "examples_input", "metric_total"]

MONITORING_PATH = "/monitoring/prometheus/metrics"


def tiny_flags(repo: Path, *extra: str) -> list[str]:
    """TF Serving flags serving ``tiny`` from ``repo`` with Prometheus on."""
    return ["--model_name=tiny", f"--model_base_path={repo / 'tiny'}",
            f"--monitoring_config_file={repo / 'monitoring.config'}", *extra]


def tiny_repo_at(root: Path) -> Path:
    """``root`` made a repository with model ``tiny`` at version 1 and a monitoring config (Prometheus on)."""
    export_tiny(root / "tiny" / "1")
    (root / "monitoring.config").write_text(f'prometheus_config {{ enable: true, path: "{MONITORING_PATH}" }}\n')
    return root


@contextlib.contextmanager
def tiny_manager_on(repo: Path) -> Iterator[ServableManager]:
    """A real ``ServableManager`` in this process, ``tiny`` version 1 of ``repo`` AVAILABLE; stopped after."""
    manager = ServableManager(SavedModelLoader(LoaderOptions()), file_system_poll_wait_seconds=60.0)
    manager.start()
    try:
        manager.reload_config(single_model_config("tiny", str(repo / "tiny")), timeout=120)
        yield manager
    finally:
        manager.stop(drain_timeout=5)


def examples_input(rows: Sequence[Mapping[str, Any]], context: Optional[Mapping[str, Any]] = None) -> input_pb2.Input:
    """A ``tensorflow.serving.Input`` carrying ``rows`` as tf.Examples (and ``context``)."""
    request_input = input_pb2.Input()
    target = request_input.example_list
    if context is not None:
        target = request_input.example_list_with_context
        codec.example_from_dict(context, target.context)
    for row in rows:
        codec.example_from_dict(row, target.examples.add())
    return request_input


def metric_total(server: EmbeddedServer, name: str) -> float:
    """``name`` summed over its label sets, read from the server's Prometheus page."""
    page = httpx.get(server.rest_url + MONITORING_PATH, timeout=60).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in page.splitlines()
               if line.split("{", 1)[0].split(" ", 1)[0] == name)
