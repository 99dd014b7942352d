"""Kubernetes manifests (kustomize) generated in part from the compose stack's files.

``deploy.k8s.generate`` renders the files kustomize consumes from the one
source they share with compose: the ``tfserving`` and ``exporter`` services
as Compose parses them, ``serving/*.config`` and the Prometheus rule files.
"""
__all__: list[str] = []
