"""The embedded server for tests: ``serving.server.launcher.ServerProcess`` under the suite's name.

``EmbeddedServer(flags, wait_for=[...])`` takes ``tensorflow_model_server``'s
own flags, so a test states exactly the command line TF Serving would get;
ports are free ones unless given. One launcher serves the tests, ``make up``,
the load tests and the benchmarks.
"""
from __future__ import annotations

from serving.server.launcher import REPO_ROOT, ServerProcess

__all__ = ["EmbeddedServer", "REPO_ROOT"]

EmbeddedServer = ServerProcess
