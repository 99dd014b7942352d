"""File descriptors: the process's limit, and what each listening port may take of it.

Each port's open connections (REST's ``--rest_api_max_connections``,
gRPC's ``--grpc_max_connections``) are capped at a quarter of
``RLIMIT_NOFILE``, so the two ports together hold at most half of the
process's descriptors and the other half stays in reserve for what the
server itself opens: model files while a version loads, logs, pipes, the
config file. ``raise_open_file_limit`` (called once, by ``main``) raises the
soft limit to the hard one first, as servers commonly do.
"""
from __future__ import annotations

import logging
import resource

__all__ = ["raise_open_file_limit", "connection_cap", "PORT_SHARE"]

logger = logging.getLogger(__name__)

PORT_SHARE = 4   # each port may hold 1/PORT_SHARE of RLIMIT_NOFILE


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; returns (before, after). Unchanged where refused."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard or (soft == resource.RLIM_INFINITY):
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        return soft, soft
    return soft, hard


def connection_cap(requested: int, flag: str = "--rest_api_max_connections") -> int:
    """``requested``, or a quarter of this process's descriptor limit if that is less (logged, naming ``flag``)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or requested <= soft // PORT_SHARE:
        return requested
    cap = max(1, soft // PORT_SHARE)
    logger.warning("%s=%d is more than a quarter of RLIMIT_NOFILE (%d): using %d, so that the other port, "
                   "model files and logs keep descriptors", flag, requested, soft, cap)
    return cap
