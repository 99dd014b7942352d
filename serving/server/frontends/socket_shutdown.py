"""Shut this process's own sockets by port or path, found through ``/proc/self/fd``.

grpcio offers no way to stop accepting connections without starting its
shutdown (which cancels every call not yet taken), nor to close the
connections it accepted; the gRPC drain (``grpc_drain``) needs both. The
sockets are found by what they are bound to, in this process's descriptor
table (Linux); elsewhere nothing is shut and grpc's own ``stop`` closes them
a moment later.
"""
from __future__ import annotations

import os
import socket
from typing import Sequence

__all__ = ["shut_sockets"]


def shut_sockets(ports: Sequence[int], paths: Sequence[str], *, listening: bool) -> int:
    """``shutdown`` this process's sockets on TCP ``ports`` and UNIX ``paths``: the listening ones
    (``listening=True``: ``SHUT_RD``, new connections are refused at once, open ones keep working),
    or the accepted connections (``SHUT_RDWR``: each client sees its connection closed).

    Found through ``/proc/self/fd`` (Linux); elsewhere nothing is shut and
    grpc's own ``stop`` closes them a moment later. Returns how many were shut.
    """
    try:
        descriptors = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return 0
    shut = 0
    for descriptor in descriptors:
        try:
            duplicate = os.dup(descriptor)
        except OSError:   # already closed
            continue
        try:
            sock = socket.socket(fileno=duplicate)
        except OSError:   # not a socket
            os.close(duplicate)
            continue
        with sock:
            try:
                if bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)) != listening:
                    continue
                if sock.family not in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6):
                    continue
                address = sock.getsockname()
                ours = address in paths if sock.family == socket.AF_UNIX else address[1] in ports
                if ours:
                    sock.shutdown(socket.SHUT_RD if listening else socket.SHUT_RDWR)
                    shut += 1
            except OSError:
                continue
    return shut
