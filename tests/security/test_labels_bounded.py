"""``request_count`` labels are bounded: a model name that is not served is counted under one label."""
from __future__ import annotations

import pytest

from serving import status
from serving.server.frontends.dataplane import DataPlane
from serving.server.metrics import UNSERVED_MODEL_LABEL, ServerMetrics


class ConfiguredNames:
    """The one part of the model manager that ``DataPlane.track`` asks: which names are served."""

    def __init__(self, *names: str) -> None:
        self._names = frozenset(names)

    def serves(self, name: str) -> bool:
        return name in self._names


def track_not_found(dataplane: DataPlane, name: str) -> None:
    with pytest.raises(status.NotFound), dataplane.track(name, "Predict", "GRPC"):
        raise status.NotFound(f"Servable not found for request: Latest({name})")


def test_unserved_names_share_one_series_and_served_names_keep_theirs():
    metrics = ServerMetrics()
    dataplane = DataPlane(ConfiguredNames("served"), metrics)  # type: ignore[arg-type] - only serves() is used
    for index in range(100):
        track_not_found(dataplane, f"unknown-{index}-" + "x" * 1000)
    track_not_found(dataplane, "served")
    page = metrics.render().decode()
    counts = [line for line in page.splitlines() if line.startswith(":tensorflow:serving:request_count{")]
    assert counts == [
        f':tensorflow:serving:request_count{{model_name="{UNSERVED_MODEL_LABEL}",status="NOT_FOUND"}} 100',
        ':tensorflow:serving:request_count{model_name="served",status="NOT_FOUND"} 1']
    assert "unknown-" not in page
