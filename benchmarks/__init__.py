"""Benchmarks: scripts that print ratios measured side by side in one run."""
__all__: list[str] = []
