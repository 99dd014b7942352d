"""The front-ends' seams are ``typing.Protocol``s that the real parts satisfy structurally.

``ServableManager`` is the data plane's ``ModelManager``, ``ServerMetrics``
its ``RequestMetrics`` and the REST front-end's ``MetricsPage``: every method
of the protocol exists on the class with the same parameters, kinds and defaults.
"""
from __future__ import annotations

import inspect

import pytest

from serving.server.core.manager import ServableManager
from serving.server.frontends.dataplane import ModelManager, RequestMetrics
from serving.server.frontends.rest import MetricsPage
from serving.server.metrics import ServerMetrics


def protocol_methods(protocol: type) -> list[str]:
    return [name for name, value in vars(protocol).items() if inspect.isfunction(value) and not name.startswith("_")]


def parameters(function) -> list[tuple]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("protocol, implementation, methods", [
    (ModelManager, ServableManager, ["acquire", "model_status", "reload_config", "serves"]),
    (RequestMetrics, ServerMetrics, ["record_request", "record_runtime", "record_examples"]),
    (MetricsPage, ServerMetrics, ["render"]),
])
def test_the_real_part_has_every_method_of_its_seam(protocol, implementation, methods):
    assert protocol_methods(protocol) == methods
    for name in methods:
        assert parameters(getattr(implementation, name)) == parameters(getattr(protocol, name)), name
