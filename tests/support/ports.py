"""Free TCP ports on loopback: the launcher's helper, the one implementation."""
from __future__ import annotations

from serving.launcher import free_port

__all__ = ["free_port"]
