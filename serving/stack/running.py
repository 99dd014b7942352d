"""What a recorded stack has running now: the facts ``make up`` refuses on and ``make down`` acts on.

Nothing here trusts ``stack.json`` alone. An embedded stack runs while a
process it recorded is still that process (pid and start time,
``serving.stack.identity``); its ports may be held by something else; a
compose stack runs while its recorded project has containers.
"""
from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Optional

from serving.config.served_config import StackState
from serving.launcher import port_open
from serving.stack.identity import ProcessIdentity

__all__ = ["embedded_processes", "held_ports", "address_port", "corrupt_state_advice", "describe_running"]


def address_port(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT`` or of a URL ``scheme://HOST:PORT``."""
    parts = urllib.parse.urlsplit(address if "//" in address else f"//{address}")
    if parts.port is None:
        raise ValueError(f"no port in {address!r}")
    return parts.hostname or "127.0.0.1", parts.port


def embedded_processes(state: StackState) -> list[tuple[str, ProcessIdentity]]:
    """The processes of the embedded stack ``state`` records that still run (make up first, then its
    server). A pid recorded without its start time (an older ``make up``) is not identifiable: left out."""
    recorded = [("make up", state.pid, state.pid_start), ("its server", state.server_pid, state.server_start)]
    return [(role, ProcessIdentity(pid, start)) for role, pid, start in recorded
            if pid and start is not None and ProcessIdentity(pid, start).alive()]


def held_ports(state: StackState) -> list[str]:
    """The recorded gRPC and REST addresses where something accepts connections now."""
    held = []
    for address in (state.grpc, state.rest):
        try:
            host, port = address_port(address)
        except ValueError:
            continue
        if port_open(port, host if host not in ("0.0.0.0", "::") else "127.0.0.1", timeout=0.5):
            held.append(address)
    return held


def describe_running(state: StackState) -> Optional[str]:
    """What of the embedded stack ``state`` still runs, in words; None when nothing does."""
    running = embedded_processes(state)
    if not running:
        return None
    who = ", ".join(f"{role} pid {p.pid}" for role, p in running)
    return f"the embedded stack ({who}; gRPC {state.grpc}, REST {state.rest})"


def corrupt_state_advice(path: Path) -> str:
    """What to do when ``stack.json`` cannot be read: find what runs by other means, stop it, remove the file."""
    return (f"  It cannot say what runs, so nothing was stopped or started. Check for a stack by other means:\n"
            f"    ps -ef | grep serving.stack       (an embedded make up; stop it with kill PID)\n"
            f"    docker ps --filter label=com.docker.compose.project   (a compose stack)\n"
            f"  then move the file aside (mv {path} {path}.bad) and run make up again.")
