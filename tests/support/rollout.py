"""The canary overlay's objects as the rollout tests patch them."""
from __future__ import annotations

__all__ = ["FIXTURE"]

# The canary overlay's shape (deploy/k8s/overlays/canary and canary-istio), reduced to what the weights touch.
FIXTURE = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: tfserving, namespace: tfs-stack}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: tfserving-rest}
spec:
  parentRefs: [{name: tfs-stack, namespace: gateway}]
  rules:
    - matches: [{path: {type: PathPrefix, value: /v1/models/other}}]
      backendRefs: [{name: other, port: 8501}]
    - matches: [{path: {type: PathPrefix, value: /v1/models}}]
      backendRefs:
        - {name: tfserving, port: 8501, weight: 100}
        - {name: tfserving-canary, port: 8501}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: tfserving-grpc, namespace: serving}
spec:
  rules:
    - backendRefs:
        - {name: tfserving-canary, port: 8500, weight: 0}
        - {name: tfserving, port: 8500, weight: 100}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: tfserving, namespace: tfs-stack}
spec:
  hosts: [tfserving.tfs-stack.svc.cluster.local]
  http:
    - name: grpc
      match: [{port: 8500}]
      route:
        - {destination: {host: tfserving.tfs-stack.svc.cluster.local, port: {number: 8500}}, weight: 100}
        - {destination: {host: tfserving-canary.tfs-stack.svc.cluster.local, port: {number: 8500}}, weight: 0}
"""
