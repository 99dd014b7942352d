"""The front-end tests' in-process fixtures (tiny model, manager, data plane, front-ends), shared here."""
from __future__ import annotations

from tests.server.frontend.conftest import (  # noqa: F401 - fixtures, found by name
    dataplane,
    grpc_frontend,
    metrics,
    rest_url,
    tiny_manager,
    tiny_repo,
)

__all__ = ["dataplane", "grpc_frontend", "metrics", "rest_url", "tiny_manager", "tiny_repo"]
