"""Shared test support: free ports and the embedded server, both from ``serving.server.launcher``."""
__all__: list[str] = []
