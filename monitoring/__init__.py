"""Monitoring for the stack: Prometheus rules, Grafana dashboards, a local Prometheus runner."""

__all__: list[str] = []
