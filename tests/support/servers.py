"""The embedded server for tests: ``serving.launcher.ServerProcess`` under the suite's name.

``EmbeddedServer(flags, wait_for=[...])`` takes ``tensorflow_model_server``'s
own flags, so a test states exactly the command line TF Serving would get;
ports are free ones unless given. One launcher serves the tests, ``make up``,
the load tests and the benchmarks.
"""
from __future__ import annotations

from serving.launcher import ServerProcess

__all__ = ["EmbeddedServer"]

EmbeddedServer = ServerProcess
