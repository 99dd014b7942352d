"""Shared test support: free ports, a subprocess launcher for the embedded server."""
