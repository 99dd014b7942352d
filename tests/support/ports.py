"""Free TCP ports on loopback: the load tests' helper, one implementation for both."""
from __future__ import annotations

from loadtest.servers import free_port

__all__ = ["free_port"]
