"""Deployment targets beyond the compose stack (``deploy/k8s``: Kubernetes manifests)."""
__all__: list[str] = []
