"""``python -m serving.server`` — see ``serving.server.main``.

Unless the environment sets ``GRPC_EXPERIMENTS`` (to anything but nothing), the server runs gRPC core
with its EventEngine listener and endpoints off (``GRPC_CORE_EXPERIMENTS``):
socket I/O then runs on the thread that polls the completion queue instead of
hopping through EventEngine's threads, which cut ~15 % of the server's CPU per
gRPC Predict on 2 cores (``python -m benchmarks.protocols``). gRPC core reads
the variable when ``grpc`` is first imported, so it is set before the server
(and with it ``grpc``) is imported.
"""
import logging
import os
import sys
from typing import MutableMapping

__all__ = ["GRPC_CORE_EXPERIMENTS", "grpc_core_environment", "run"]

GRPC_CORE_EXPERIMENTS = "-event_engine_listener,-event_engine_for_all_other_endpoints"


def grpc_core_environment(environ: MutableMapping[str, str]) -> None:
    """``GRPC_EXPERIMENTS`` = ``GRPC_CORE_EXPERIMENTS`` in ``environ``, unless it is set (and not empty) already."""
    if not environ.get("GRPC_EXPERIMENTS"):
        environ["GRPC_EXPERIMENTS"] = GRPC_CORE_EXPERIMENTS


def run() -> int:
    """Serve (``serving.server.main.main``) with ``grpc_core_environment`` applied first; the exit code."""
    grpc_core_environment(os.environ)
    from serving.server.main import main  # imports grpc: after GRPC_EXPERIMENTS

    code = main()
    # Everything is stopped and drained by now; skip the seconds TensorFlow's and gRPC's
    # interpreter teardown takes, so a stopped container exits within its grace period.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    return code


if __name__ == "__main__":
    os._exit(run())
